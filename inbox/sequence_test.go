package inbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"testing"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemseq"
	"github.com/idemhq/idem/inbox"
)

// partitionOffset is the fake broker's position of a delivery: its partition and
// offset headers.
func partitionOffset(d idem.Delivery) (string, uint64, uint64, bool) {
	off, err := strconv.ParseUint(d.Headers["offset"], 10, 64)
	return "orders/" + d.Headers["partition"], 0, off, err == nil
}

// TestSequenceDedup: deduplicating by (partition, offset) applies every message once
// and keeps one row per partition, not one per message.
func TestSequenceDedup(t *testing.T) {
	t.Parallel()
	forEachDB(t, func(t *testing.T, b bundle) {
		ctx := context.Background()
		tracker, err := idemseq.OpenSQL(ctx, b.db, idemseq.Config{Scope: "ledger"})
		if err != nil {
			t.Fatal(err)
		}
		fb := newFakeBroker()
		c, err := inbox.New(ctx, fb, b.txdb, b.store, credit, inbox.Config{Consumer: "ledger", BatchSize: 8},
			inbox.WithSequences[*sql.Tx](tracker, partitionOffset))
		if err != nil {
			t.Fatal(err)
		}
		const n = 40
		for i := 0; i < n; i++ {
			m := order(i)
			m.Headers = map[string]string{"partition": fmt.Sprint(i % 2), "offset": fmt.Sprint(i / 2)}
			fb.Publish(ctx, m, m) // redelivered: the same partition and offset twice
		}
		fb.loseAcks = 10
		drain(t, c, fb)
		exactLedger(t, b.db, n, "after the redeliveries")
		var seqRows, keyRows int
		b.db.QueryRow("SELECT COUNT(*) FROM idem_sequences").Scan(&seqRows)
		b.db.QueryRow("SELECT COUNT(*) FROM idem_records").Scan(&keyRows)
		if seqRows != 2 || keyRows != 0 {
			t.Fatalf("%d sequence rows and %d key records; want 2 (one per partition) and 0", seqRows, keyRows)
		}
	})
}
