package pgcdc

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

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
// only) does not stream back to the relay. It finds every row of the batch: the
// batch was published only once its transactions were visible (visible.go).

const (
	// markAttempts bounds the tries of one batch's mark before the session ends
	// (and the batch is published again by the next).
	markAttempts = 3
	// markTimeout bounds one try.
	markTimeout = 10 * time.Second
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
	for _, it := range s.meta[:n] {
		if it.row != 0 && !s.r.parked[it.pos] {
			ids = append(ids, it.row)
		}
	}
	if len(ids) == 0 {
		return nil
	}
	now := time.Now().UnixMilli()
	for attempt := 1; ; attempt++ {
		marked, err := s.markOnce(ctx, now, ids)
		if err == nil {
			if m := s.r.m; m != nil {
				m.marked.Add(float64(marked))
			}
			return nil
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
	}
}

// markOnce runs the driver's MarkPublishedIDs on the lock's connection, in one
// round trip: a pipeline of one implicit transaction, which names the outbox's
// schema first (the outbox's statements name idem_outbox unqualified).
func (s *stream) markOnce(ctx context.Context, now int64, ids []int64) (int64, error) {
	mctx, cancel := context.WithTimeout(ctx, markTimeout)
	defer cancel()
	b := &pgx.Batch{}
	b.Queue("SELECT set_config('search_path', $1, true)", pgx.Identifier{s.schema}.Sanitize())
	b.Queue(markSQL, now, ids)
	br := s.ctl.SendBatch(mctx, b)
	_, err := br.Exec()
	var marked int64
	if err == nil {
		var tag pgconn.CommandTag
		tag, err = br.Exec()
		marked = tag.RowsAffected()
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return marked, err
}

// markSQL is PostgreSQL's MarkPublishedIDs.
var markSQL = idempg.Driver().Outbox().MarkPublishedIDs
