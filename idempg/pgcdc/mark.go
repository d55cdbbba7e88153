package pgcdc

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemhq/idem/idempg"
	"github.com/idemhq/idem/internal/wait"
)

// The mark: the relay sets published_at of the outbox rows the broker
// acknowledged, so that the audit (which reads published rows only), the outbox's
// Cleanup and `idem outbox` see them as they see the polling relay's. It runs
// after the broker acknowledged a batch and before the slot's position moves past
// it, which gives, at each point a relay may die:
//
//   - after the acknowledgement, before the mark: nothing marked, nothing
//     confirmed; the next relay streams the batch again, publishes it again (the
//     same IDs and positions) and marks it.
//   - after the mark, before the confirm: the rows are published (they were), and
//     published again by the next relay, whose mark leaves their first
//     published_at as it was (MarkPublishedIDs marks unpublished rows only).
//   - after the confirm: marked and confirmed.
//
// So a confirmed message is never left unmarked, and the mark adds no loss: at
// least once, as before. The mark is an UPDATE, which the publication (inserts
// only) does not stream back to the relay.
//
// The slot may stream a transaction before other sessions see it: its commit is in
// the WAL (which the slot reads) before it is visible, and it stays invisible while
// its commit waits, for a synchronous standby above all (PostgreSQL 15 does not hold
// a logical slot back for one), or merely for the CPU. An UPDATE then finds none of
// its rows, and a batch marked so was confirmed with them unmarked (seen as
// TestRelayMarksWhatItPublished failing in CI). So the mark's statement also says
// whether every transaction of the batch's rows is visible in its snapshot, and
// the mark runs again until they are (a row then missing was deleted), for at most
// visibleWait; past it the session ends unconfirmed, and the batch is published
// and marked again by the next.

const (
	// markAttempts bounds the tries of one batch's mark before the session ends
	// (and the batch is published again by the next).
	markAttempts = 3
	// markTimeout bounds one try.
	markTimeout = 10 * time.Second
	// visibleWait bounds the wait for the batch's transactions to be visible, below
	// the server's default wal_sender_timeout (60 s): the session reads nothing
	// meanwhile.
	visibleWait = 30 * time.Second
)

// mark sets published_at of the outbox rows among the first n messages of the
// batch, which are settled: those the broker acknowledged, not those parked nor
// EmitTx's (no row). It tries markAttempts times while the connection lives, then
// fails the session, so that the batch is not confirmed unmarked.
func (s *stream) mark(ctx context.Context, n int) error {
	if s.r.cfg.SkipMarkPublished {
		return nil
	}
	ids := make([]int64, 0, n)
	var xids []int64
	for _, it := range s.meta[:n] {
		if it.row != 0 && !s.r.parked[it.pos] {
			ids = append(ids, it.row)
			if len(xids) == 0 || xids[len(xids)-1] != int64(it.xid) {
				xids = append(xids, int64(it.xid))
			}
		}
	}
	if len(ids) == 0 {
		return nil
	}
	now := time.Now().UnixMilli()
	var invisibleSince time.Time
	var total int64
	pause := time.Duration(0) // at first the commit is usually a moment from visible: at once
	for attempt := 1; ; {
		marked, visible, err := s.markOnce(ctx, now, ids, xids)
		if err == nil {
			total += marked
			if visible {
				if m := s.r.m; m != nil {
					m.marked.Add(float64(total))
				}
				return nil
			}
			// Some transaction of the batch commits still: its rows were not seen.
			t := time.Now()
			switch {
			case invisibleSince.IsZero():
				invisibleSince = t
			case t.Sub(invisibleSince) >= visibleWait:
				return backendErr("mark", fmt.Errorf("mark %d outbox rows published: a transaction of them was streamed by the slot "+
					"and is still not visible after %v (its commit waits, for a synchronous standby?); the batch is published again", len(ids), visibleWait))
			case pause == 128*time.Millisecond:
				s.r.cfg.Logger.WarnContext(ctx, "cdc relay: a transaction the slot streamed is not visible yet (its commit waits, for a synchronous standby?): "+
					"the mark waits for it", "rows", len(ids), "waited", t.Sub(invisibleSince).Round(time.Millisecond))
			}
			if !wait.Sleep(ctx, pause) {
				return ctx.Err()
			}
			pause = min(max(2*pause, 500*time.Microsecond), 256*time.Millisecond)
			continue
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if attempt == markAttempts || s.ctl.IsClosed() {
			return backendErr("mark", fmt.Errorf("mark %d outbox rows published (tried %d times; the batch is published again): %w", len(ids), attempt, err))
		}
		s.r.cfg.Logger.WarnContext(ctx, "cdc relay: marking published rows failed; trying again", "rows", len(ids), "attempt", attempt, "err", err)
		if !wait.Sleep(ctx, time.Duration(attempt)*50*time.Millisecond) {
			return ctx.Err()
		}
		attempt++
	}
}

// markOnce runs the driver's MarkPublishedIDs on the lock's connection, in one
// round trip: a pipeline of one implicit transaction, which names the outbox's
// schema first (the outbox's statements name idem_outbox unqualified). visible
// reports whether the transactions xids were all visible to the UPDATE.
func (s *stream) markOnce(ctx context.Context, now int64, ids, xids []int64) (marked int64, visible bool, err error) {
	mctx, cancel := context.WithTimeout(ctx, markTimeout)
	defer cancel()
	b := &pgx.Batch{}
	b.Queue("SELECT set_config('search_path', $1, true)", pgx.Identifier{s.schema}.Sanitize())
	b.Queue(markSQL, now, ids, xids)
	br := s.ctl.SendBatch(mctx, b)
	if _, err = br.Exec(); err == nil {
		err = br.QueryRow().Scan(&marked, &visible)
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return marked, visible, err
}

// markSQL is PostgreSQL's MarkPublishedIDs ($1 now, $2 ids), and whether the
// transactions $3 (32-bit IDs, as pgoutput gives them) are all visible in the
// statement's snapshot, which the UPDATE shares. A 32-bit ID is widened with the
// epoch of the snapshot's xmax: the transaction began before the snapshot, so its
// full ID is the one below xmax with these low 32 bits.
var markSQL = `WITH m AS (` + idempg.Driver().Outbox().MarkPublishedIDs + ` RETURNING 1),
snap AS (SELECT pg_current_snapshot() AS s, pg_snapshot_xmax(pg_current_snapshot())::text::bigint AS xmax)
SELECT (SELECT count(*) FROM m), COALESCE((
	SELECT bool_and(pg_visible_in_snapshot((CASE WHEN (snap.xmax & ~4294967295) | x < snap.xmax THEN (snap.xmax & ~4294967295) | x
		ELSE ((snap.xmax & ~4294967295) | x) - 4294967296 END)::text::xid8, snap.s))
	FROM snap, unnest($3::bigint[]) AS x), true)`
