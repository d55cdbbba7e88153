package outbox

import (
	"context"
	"time"
)

// Cleanup deletes published messages older than Retention, in batches of
// CleanupBatch, and returns how many it deleted. It also deletes the rows of relay
// instances stale for an hour: relays that died (one stopped cleanly deletes its
// own).
func (r *Relay[Tx]) Cleanup(ctx context.Context) (int, error) {
	if err := r.o.db.InTx(ctx, func(tx Tx) error {
		_, err := r.o.db.Querier(tx).Exec(ctx, r.o.stmts.DeleteStaleRelays, r.o.now().Add(-relayForgetAfter).UnixMilli())
		return err
	}); err != nil {
		return 0, r.wrapErr(err)
	}
	cutoff := r.o.now().Add(-r.cfg.Retention).UnixMilli()
	total := 0
	for {
		var n int64
		err := r.o.db.InTx(ctx, func(tx Tx) (err error) {
			n, err = r.o.db.Querier(tx).Exec(ctx, r.o.stmts.Cleanup, cutoff, r.cfg.CleanupBatch)
			return err
		})
		if err != nil {
			return total, r.wrapErr(err)
		}
		total += int(n)
		if n < int64(r.cfg.CleanupBatch) {
			return total, nil
		}
	}
}

// backlog feeds the gauges: unpublished count, age of the oldest, parked count.
func (r *Relay[Tx]) backlog() (unpublished, oldestAge, parked float64) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var u, p int64
	var oldest *int64
	err := r.o.db.InTx(ctx, func(tx Tx) error {
		return r.o.db.Querier(tx).QueryRow(ctx, r.o.stmts.Backlog).Scan(&u, &p, &oldest)
	})
	if err != nil {
		return -1, -1, -1
	}
	if oldest != nil {
		oldestAge = float64(r.o.now().UnixMilli()-*oldest) / 1000
	}
	return float64(u), oldestAge, float64(p)
}
