package outbox

import (
	"context"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemsql"
)

// Stall returns how long messages have been waiting while no relay published any:
// 0 when no message waits (none is unpublished and not parked), else the time since
// the latest of the last publication by any relay of this outbox (the newest
// published_at), this relay's start and the last call that found nothing waiting.
// A health check compares it to a bound: it grows when every round fails, when the
// broker refuses every message, when the rows that wait cannot be read or decoded,
// whatever the cause; not when a relay publishes slowly, nor when another relay of
// the outbox publishes. Messages waiting out a backoff count as waiting: one
// message the broker keeps refusing, alone in the outbox, is a stall until it is
// parked. It runs one query, which two indexes answer.
func (r *Relay[Tx]) Stall(ctx context.Context) (time.Duration, error) {
	var waiting int64
	var last *int64
	err := read(ctx, r.o.db, func(q idemsql.Querier) error {
		return q.QueryRow(ctx, r.o.stmts.Stall).Scan(&waiting, &last)
	})
	if err != nil {
		return 0, &idem.BackendError{Backend: r.o.db.Dialect().String(), Op: "outbox.stall", Err: err}
	}
	now := r.o.now()
	if waiting == 0 {
		r.idleAt.Store(now.UnixMilli())
		return 0, nil
	}
	since := max(r.inst.started.UnixMilli(), r.idleAt.Load())
	if last != nil {
		since = max(since, *last)
	}
	return max(now.Sub(time.UnixMilli(since)), 0), nil
}
