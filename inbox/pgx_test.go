package inbox_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idempg"
	"github.com/idemhq/idem/inbox"
	"github.com/idemhq/idem/internal/testsvc"
)

// TestPgx: the same consumer on pgx transactions (idempg.TxDB and idempg.Store),
// with duplicates, lost acks and a failing message in a batch.
func TestPgx(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testsvc.PostgresPool(t)
	if _, err := pool.Exec(ctx, "CREATE TABLE ledger (msg_id TEXT NOT NULL, amount BIGINT NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	store, err := idempg.New(ctx, pool, idempg.Config{})
	if err != nil {
		t.Fatal(err)
	}
	fb := newFakeBroker()
	failedOnce := false
	handle := func(ctx context.Context, tx pgx.Tx, m idem.Message) error {
		if m.ID == "order-00007" && !failedOnce {
			failedOnce = true
			return errTransient
		}
		var p struct{ Amount int64 }
		if err := json.Unmarshal(m.Payload, &p); err != nil {
			return inbox.Permanent(err)
		}
		_, err := tx.Exec(ctx, "INSERT INTO ledger (msg_id, amount) VALUES ($1, $2)", m.ID, p.Amount)
		return err
	}
	c, err := inbox.New(ctx, fb, idempg.TxDB(pool), store, handle, inbox.Config{Consumer: "pgx", BatchSize: 16,
		Backoff: noBackoff})
	if err != nil {
		t.Fatal(err)
	}
	const n = 100
	for i := 0; i < n; i++ {
		fb.Publish(ctx, order(i), order(i))
	}
	fb.loseAcks = 20
	drainAny(t, c.Run, fb)
	var rows, distinct int
	var sum int64
	if err := pool.QueryRow(ctx, "SELECT COUNT(*), COUNT(DISTINCT msg_id), COALESCE(SUM(amount), 0) FROM ledger").Scan(&rows, &distinct, &sum); err != nil {
		t.Fatal(err)
	}
	checkLedger(t, rows, distinct, sum, n, "on pgx")
}
