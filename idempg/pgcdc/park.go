package pgcdc

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"

	"github.com/idemhq/idem/idempg"
	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/outbox"
)

// parkTimeout bounds the transaction that parks one message.
const parkTimeout = 30 * time.Second

// position is a message's place in the log: its transaction's commit LSN and its
// index there.
type position struct {
	commit uint64
	index  int
}

// item is what the relay keeps beside a message of the batch.
type item struct {
	pos     position
	at      time.Time         // its transaction's commit time
	xid     uint32            // its transaction's ID
	visible bool              // its transaction was seen visible (awaitVisible)
	row     int64             // its outbox row; 0 for a WAL message
	headers map[string]string // its own headers, without the position's
}

// txEnd is a transaction completed in the batch: its commit LSN, and its end, the
// position to confirm once its messages are settled.
type txEnd struct{ commit, end uint64 }

// parkSent parks message i of the batch, which the sink refused with cause.
func (s *stream) parkSent(ctx context.Context, i int, cause error) error {
	it, m := s.meta[i], s.batch[i]
	m.Headers = it.headers
	if err := s.park(ctx, it.pos, outbox.Unpublishable{Row: it.row, Message: m}, cause); err != nil {
		return err
	}
	delete(s.r.attempts, it.pos)
	return nil
}

// park records a message the relay cannot publish in the outbox table (ParkTx),
// where `idem outbox` and the admin API show it with its reason and an operator
// retries or discards it, so that the slot moves on past it. The relay's role may
// write there: Setup checks it.
func (s *stream) park(ctx context.Context, pos position, u outbox.Unpublishable, cause error) error {
	where := fmt.Sprintf("message %d of the transaction committed at %s", pos.index, FormatLSN(pos.commit))
	u.Reason = "cdc relay: " + where + ": " + cause.Error()
	pctx, cancel := context.WithTimeout(ctx, parkTimeout)
	defer cancel()
	err := pgx.BeginFunc(pctx, s.ctl, func(tx pgx.Tx) error {
		// The outbox's statements name idem_outbox unqualified.
		if _, err := tx.Exec(pctx, "SELECT set_config('search_path', $1, true)", pgx.Identifier{s.schema}.Sanitize()); err != nil {
			return err
		}
		return outbox.ParkTx(pctx, idemsql.Postgres, idempg.Querier(tx), u, time.Now())
	})
	if err != nil {
		return backendErr("park", fmt.Errorf("%s: %w", where, err))
	}
	s.r.parked[pos] = true
	s.r.prog.update(func(h *Health) { h.Parked++ })
	if m := s.r.m; m != nil {
		m.parked.Inc()
	}
	s.r.cfg.Logger.WarnContext(ctx, "cdc relay: parked a message it cannot publish, and goes on", "id", u.Message.ID, "topic", u.Message.Topic,
		"row", u.Row, "lsn", FormatLSN(pos.commit), "index", pos.index, "err", cause,
		"fix", "`idem outbox parked` (or the admin API) lists it: fix its producer, then retry or discard it")
	return nil
}

// ignored counts the messages of EmitPrefix not published since the last warning.
type ignored struct {
	n      int
	logged time.Time
}

// ignore counts a logical decoding message of EmitPrefix that is not published,
// Config.Messages being off, and warns at most once a minute.
func (r *Relay) ignore(ctx context.Context, lsn pglogrepl.LSN) {
	if r.m != nil {
		r.m.ignored.Inc()
	}
	r.ignored.n++
	if now := time.Now(); now.Sub(r.ignored.logged) >= time.Minute {
		r.cfg.Logger.WarnContext(ctx, "cdc relay: WAL messages (pg_logical_emit_message) are off: not publishing them", "count", r.ignored.n,
			"last_lsn", lsn.String(), "fix", "if your services write them with pgcdc.EmitTx, revoke EXECUTE on pg_logical_emit_message from PUBLIC, "+
				"grant it to the outbox's writers, and run the relay with --cdc-messages (Config.Messages); else a role without privilege on the outbox wrote them")
		r.ignored.n, r.ignored.logged = 0, now
	}
}
