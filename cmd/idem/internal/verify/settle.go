package verify

import (
	"context"
	"fmt"
	"time"

	"github.com/idemhq/idem/internal/wait"
)

// Waiting for the flow to settle, and the progress shown meanwhile.

// settle waits until every order is published and applied and the deliveries have
// stopped for longer than the broker's ack wait (so late redeliveries are counted),
// or until the timeout. It reports whether the flow settled. While the audit
// repairs, the orders it republishes are waited for like any other; an audit that
// only reads (Flow.Repair off) settles the flow once all that is left is the
// messages it finds missing: nothing will bring them.
func (r *run) settle(ctx context.Context, since time.Time) bool {
	deadline := time.Now().Add(r.f.Timeout)
	quiet := r.f.Broker.AckWait() + time.Second
	if r.queue != nil {
		quiet = r.queueLease() + time.Second // longer with Flow.Skew
	}
	last, lastChange := -1, time.Now()
	for ctx.Err() == nil && time.Now().Before(deadline) {
		if n := r.delivered.Total(); n != last {
			last, lastChange = n, time.Now()
		}
		b, err := r.backlog(ctx)
		if err == nil && (b.Total() == 0 || r.onlyMissing(b)) && time.Since(lastChange) >= quiet {
			return true
		}
		wait.Sleep(ctx, 100*time.Millisecond)
	}
	return false
}

// onlyMissing reports whether the backlog is the orders whose messages a
// read-only audit finds missing, and nothing else: each such order unapplied
// and unpaid, and no message in flight.
func (r *run) onlyMissing(b Pending) bool {
	if r.audit == nil || r.audit.repairing {
		return false
	}
	missing, inFlight, ok := r.audit.last()
	return ok && missing > 0 && inFlight == 0 && b.Unpublished == 0 && b.Unshown == 0 &&
		int64(b.Unapplied) == missing && int64(b.Unpaid) == missing
}

// refusedForDeadline excludes, in a query over the orders o, those whose event the
// inbox refused for its deadline (FaultMessagePastDeadline): they are never
// applied nor paid.
const refusedForDeadline = " AND NOT EXISTS (SELECT 1 FROM idem_dead_letters d WHERE d.consumer = '" + consumerName +
	"' AND d.msg_id = o.id AND d.kind = 'deadline' AND d.replayed_at IS NULL)"

// Pending is what the flow has still to do, by step: orders not yet published,
// applied to the ledger, paid, shown to the browser.
type Pending struct {
	Unpublished int `json:"unpublished"`
	Unapplied   int `json:"unapplied"`
	Unpaid      int `json:"unpaid"`
	Unshown     int `json:"unshown"`
}

// Total counts each step of each order once.
func (b Pending) Total() int { return b.Unpublished + b.Unapplied + b.Unpaid + b.Unshown }

// paren is " (…)" with the steps, or "" for nil (a report built without a run).
func (b *Pending) paren() string {
	if b == nil {
		return ""
	}
	return fmt.Sprintf(" (%d unpublished, %d unapplied, %d unpaid, %d unshown)", b.Unpublished, b.Unapplied, b.Unpaid, b.Unshown)
}

func (r *run) backlog(ctx context.Context) (Pending, error) {
	var b Pending
	var err error
	switch {
	case r.queue != nil: // enqueued with the order: nothing to publish
	case r.f.CDC != nil: // published means the broker acknowledged it (the CDC relay marks its rows after)
		b.Unpublished, err = r.unstored(ctx)
	default:
		err = r.f.DB.QueryRowContext(ctx, "SELECT COUNT(*) FROM idem_outbox WHERE published_at IS NULL").Scan(&b.Unpublished)
	}
	if err != nil {
		return b, err
	}
	err = r.f.DB.QueryRowContext(ctx, "SELECT COUNT(*) FROM "+tableOrders+" o WHERE NOT EXISTS (SELECT 1 FROM "+tableLedger+" l WHERE l.order_id = o.id)"+refusedForDeadline).Scan(&b.Unapplied)
	if err != nil {
		return b, err
	}
	err = r.f.DB.QueryRowContext(ctx, "SELECT COUNT(*) FROM "+tableOrders+" o WHERE NOT EXISTS (SELECT 1 FROM "+tablePaid+" p WHERE p.order_id = o.id)"+refusedForDeadline).Scan(&b.Unpaid)
	if err != nil {
		return b, err
	}
	b.Unshown, err = r.push.pending(ctx)
	return b, err
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
