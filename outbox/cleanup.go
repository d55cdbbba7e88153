package outbox

import (
	"context"
	"time"

	"github.com/idemhq/idem/idemsql"
)

// Cleanup deletes published messages older than Retention, in batches of
// CleanupBatch, and returns how many it deleted. It also deletes the rows of relay
// instances stale for an hour: relays that died (one stopped cleanly deletes its
// own).
func (r *Relay[Tx]) Cleanup(ctx context.Context) (int, error) {
	if err := r.o.db.InTx(ctx, func(tx Tx) error {
		_, err := r.o.db.Querier(tx).Exec(ctx, "DELETE FROM idem_outbox_relays WHERE "+staleAtSQL+" < $1",
			r.o.now().Add(-relayForgetAfter).UnixMilli())
		return err
	}); err != nil {
		return 0, wrapErr(r.o.db.Dialect().String(), err)
	}
	cutoff := r.o.now().Add(-r.cfg.Retention).UnixMilli()
	total := 0
	for {
		var n int64
		err := r.o.db.InTx(ctx, func(tx Tx) (err error) {
			n, err = r.o.db.Querier(tx).Exec(ctx, cleanupSQL[r.o.db.Dialect()], cutoff, r.cfg.CleanupBatch)
			return err
		})
		if err != nil {
			return total, wrapErr(r.o.db.Dialect().String(), err)
		}
		total += int(n)
		if n < int64(r.cfg.CleanupBatch) {
			return total, nil
		}
	}
}

// cleanupSQL deletes up to $2 rows published before $1. MySQL can neither limit an
// IN subquery nor read the table it deletes from in one, but limits DELETE itself.
var cleanupSQL = map[idemsql.Dialect]string{
	idemsql.Postgres: `DELETE FROM idem_outbox WHERE id IN (
		SELECT id FROM idem_outbox WHERE published_at IS NOT NULL AND published_at < $1 LIMIT $2)`,
	idemsql.SQLite: `DELETE FROM idem_outbox WHERE id IN (
		SELECT id FROM idem_outbox WHERE published_at IS NOT NULL AND published_at < $1 LIMIT $2)`,
	idemsql.MySQL: `DELETE FROM idem_outbox WHERE published_at IS NOT NULL AND published_at < $1 ORDER BY published_at LIMIT $2`,
}

// backlog feeds the gauges: unpublished count, age of the oldest, parked count.
func (r *Relay[Tx]) backlog() (unpublished, oldestAge, parked float64) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var u, p int64
	var oldest *int64
	err := r.o.db.InTx(ctx, func(tx Tx) error {
		return r.o.db.Querier(tx).QueryRow(ctx, `SELECT
			COUNT(CASE WHEN parked_at IS NULL THEN 1 END),
			COUNT(CASE WHEN parked_at IS NOT NULL AND NOT EXISTS (
				SELECT 1 FROM idem_outbox_discarded x WHERE x.id = idem_outbox.id) THEN 1 END),
			MIN(CASE WHEN parked_at IS NULL THEN created_at END)
			FROM idem_outbox WHERE published_at IS NULL`).Scan(&u, &p, &oldest)
	})
	if err != nil {
		return -1, -1, -1
	}
	if oldest != nil {
		oldestAge = float64(r.o.now().UnixMilli()-*oldest) / 1000
	}
	return float64(u), oldestAge, float64(p)
}
