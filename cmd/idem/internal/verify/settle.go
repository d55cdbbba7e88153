package verify

import (
	"context"
	"time"

	"github.com/idemhq/idem/internal/wait"
)

// Waiting for the flow to settle, and the progress shown meanwhile.

// settle waits until every order is published and applied and the deliveries have
// stopped for longer than the broker's ack wait (so late redeliveries are counted),
// or until the timeout. It reports whether the flow settled.
func (r *run) settle(ctx context.Context, since time.Time) bool {
	deadline := time.Now().Add(r.f.Timeout)
	quiet := r.f.Broker.AckWait() + time.Second
	last, lastChange := -1, time.Now()
	for ctx.Err() == nil && time.Now().Before(deadline) {
		if n := r.delivered.Total(); n != last {
			last, lastChange = n, time.Now()
		}
		pending, err := r.pending(ctx)
		if err == nil && pending == 0 && time.Since(lastChange) >= quiet {
			return true
		}
		wait.Sleep(ctx, 100*time.Millisecond)
	}
	return false
}

// refusedForDeadline excludes, in a query over the orders o, those whose event the
// inbox refused for its deadline (FaultMessagePastDeadline): they are never
// applied nor paid.
const refusedForDeadline = " AND NOT EXISTS (SELECT 1 FROM idem_dead_letters d WHERE d.consumer = '" + consumerName +
	"' AND d.msg_id = o.id AND d.kind = 'deadline' AND d.replayed_at IS NULL)"

// pending counts orders not yet published, applied to the ledger or paid.
func (r *run) pending(ctx context.Context) (int, error) {
	var unpublished, unapplied int
	var err error
	if r.f.CDC != nil { // the CDC relay marks nothing: published means the broker acknowledged it
		unpublished, err = r.unstored(ctx)
	} else {
		err = r.f.DB.QueryRowContext(ctx, "SELECT COUNT(*) FROM idem_outbox WHERE published_at IS NULL").Scan(&unpublished)
	}
	if err != nil {
		return 0, err
	}
	err = r.f.DB.QueryRowContext(ctx, "SELECT COUNT(*) FROM "+tableOrders+" o WHERE NOT EXISTS (SELECT 1 FROM "+tableLedger+" l WHERE l.order_id = o.id)"+refusedForDeadline).Scan(&unapplied)
	if err != nil {
		return 0, err
	}
	var unpaid int
	err = r.f.DB.QueryRowContext(ctx, "SELECT COUNT(*) FROM "+tableOrders+" o WHERE NOT EXISTS (SELECT 1 FROM "+tablePaid+" p WHERE p.order_id = o.id)"+refusedForDeadline).Scan(&unpaid)
	if err != nil {
		return 0, err
	}
	unshown, err := r.push.pending(ctx)
	return unpublished + unapplied + unpaid + unshown, err
}

func (r *run) reportProgress(ctx context.Context) <-chan struct{} {
	done := make(chan struct{})
	if r.f.Progress == nil {
		close(done)
		return done
	}
	go func() {
		defer close(done)
		t := time.NewTicker(250 * time.Millisecond)
		defer t.Stop()
		for {
			var applied, paid int
			_ = r.f.DB.QueryRowContext(ctx, "SELECT COUNT(DISTINCT order_id) FROM "+tableLedger).Scan(&applied)
			_ = r.f.DB.QueryRowContext(ctx, "SELECT COUNT(*) FROM "+tablePaid).Scan(&paid)
			placed := int(r.placed.Load())
			r.f.Progress(Progress{Placed: placed, Applied: applied, Paid: paid, Orders: r.f.Orders, Faults: r.inj.Total(), Settling: placed >= r.f.Orders})
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return done
}
