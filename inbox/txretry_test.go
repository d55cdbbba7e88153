package inbox_test

import (
	"context"
	"database/sql"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/inbox"
)

// cuttingStore is a key store whose first cuts claims lose the database
// connection: on Postgres the claim's own backend is terminated
// (pg_terminate_backend), a real cut in the middle of the batch's transaction;
// on SQLite, which has no connection to lose, the claim fails as a cut one does.
type cuttingStore struct {
	idem.TxStore[*sql.Tx]
	postgres bool
	cuts     atomic.Int32
}

func (s *cuttingStore) ClaimTx(ctx context.Context, tx *sql.Tx, c idem.Claim) (idem.Result, error) {
	if s.cuts.Add(-1) >= 0 {
		if !s.postgres {
			return idem.Result{}, errors.New("connection reset by peer")
		}
		_, err := tx.ExecContext(ctx, "SELECT pg_terminate_backend(pg_backend_pid())")
		if err == nil {
			err = errors.New("the backend was terminated and the statement succeeded")
		}
		return idem.Result{}, err
	}
	return s.TxStore.ClaimTx(ctx, tx, c)
}

// TestCutConnectionKeepsTheBatch cuts the database connection under a batch's
// transaction three times in a row: the consumer runs the batch again in
// process, each message is delivered once and applied once; with
// TxRetryWindow negative the batch goes back to the broker, as it used to.
func TestCutConnectionKeepsTheBatch(t *testing.T) {
	forEachDB(t, func(t *testing.T, b bundle) {
		for _, tc := range []struct {
			name       string
			window     time.Duration // Config.TxRetryWindow
			deliveries func(n int) bool
		}{
			{"held", 0, func(n int) bool { return n == 32 }},
			{"handed back", -time.Nanosecond, func(n int) bool { return n > 32 }},
		} {
			t.Run(tc.name, func(t *testing.T) {
				if _, err := b.db.Exec("DELETE FROM ledger"); err != nil {
					t.Fatal(err)
				}
				store := &cuttingStore{TxStore: b.store, postgres: b.txdb.Driver.Dialect() == idemsql.Postgres}
				store.cuts.Store(3)
				fb := newFakeBroker()
				publishOrders(fb, 32, 1)
				b := b
				b.store = store
				c := newConsumer(t, b, fb, credit, inbox.Config{Consumer: "cut-" + tc.name, BatchSize: 32, TxRetryWindow: tc.window})
				drain(t, c, fb)
				exactLedger(t, b.db, 32, "after the cuts")
				fb.mu.Lock()
				delivered := fb.next
				fb.mu.Unlock()
				if store.cuts.Load() >= 0 {
					t.Fatalf("only %d of 3 cuts happened", 3-store.cuts.Load())
				}
				if !tc.deliveries(delivered) {
					t.Fatalf("the broker delivered the 32 messages %d times in all", delivered)
				}
			})
		}
	})
}
