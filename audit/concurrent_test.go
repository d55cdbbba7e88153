package audit_test

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/audit"
	"github.com/idemhq/idem/migrate"
	"github.com/idemhq/idem/outbox"
)

// Two audits repairing at once (idem audit --every --repair beside an operator's
// repair from the console) republish each missing message once: the original
// row's lock makes them take turns, and the second finds the first one's repair.
func TestConcurrentRepairsCopyOnce(t *testing.T) {
	for _, kind := range []string{"sqlite", "postgres", "mysql"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			testConcurrentRepairs(t, kind)
		})
	}
}

func testConcurrentRepairs(t *testing.T, kind string) {
	const n, auditors = 200, 4
	ctx := context.Background()
	prod, cons := openDB(t, kind), openDB(t, "sqlite")
	if _, err := outbox.New(ctx, prod.tx, outbox.Config{}); err != nil {
		t.Fatal(err)
	}
	base := time.Now().Add(-10 * time.Minute).UnixMilli()
	var (
		values []string
		args   []any
	)
	for i := range n {
		p := len(args)
		values = append(values, fmt.Sprintf("($%d, 'orders', '', 0, '{}', $%d, $%d, $%d, 1, $%d)", p+1, p+2, p+3, p+4, p+5))
		args = append(args, msgID(i), []byte("payload"), base, base, base+int64(i))
	}
	prod.exec(t, `INSERT INTO idem_outbox (msg_id, topic, ordering_key, part, headers, payload, created_at, available_at,
		attempts, published_at) VALUES `+strings.Join(values, ", "), args...)
	if err := migrate.Ensure(ctx, cons.tx, false, migrate.Inbox); err != nil {
		t.Fatal(err)
	}
	err := cons.tx.InTx(ctx, func(tx *sql.Tx) error { // the consumer got the even ones
		for i := 0; i < n; i += 2 {
			k := idem.Key{Scope: "ledger", ID: msgID(i)}
			res, err := cons.store.ClaimTx(ctx, tx, idem.Claim{Key: k, Lease: time.Minute, Retention: 24 * time.Hour})
			if err != nil {
				return err
			}
			if err := cons.store.CompleteTx(ctx, tx, k, res.Token, nil); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	side, err := audit.ConsumersIn(cons.tx, audit.Consumer{Name: "ledger", Topics: []string{"orders"}})
	if err != nil {
		t.Fatal(err)
	}
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		repaired = map[string]int{}
		start    = make(chan struct{})
	)
	for range auditors {
		a, err := audit.New(prod.tx, audit.Config{Grace: time.Minute, Repair: true, PageSize: 20, Logger: quiet}, side)
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			<-start
			rep, err := a.Run(ctx)
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			for _, r := range rep.Repaired {
				repaired[r.MsgID]++
			}
		})
	}
	close(start)
	wg.Wait()
	if len(repaired) != n/2 {
		t.Errorf("%d messages repaired, want the %d missing", len(repaired), n/2)
	}
	for id, k := range repaired {
		if k != 1 {
			t.Errorf("%s republished by %d audits, want 1", id, k)
		}
	}
	if got := prod.count(t, "SELECT COUNT(*) FROM idem_outbox_repairs"); got != n/2 {
		t.Errorf("idem_outbox_repairs holds %d repairs, want %d", got, n/2)
	}
	if got := prod.count(t, "SELECT COUNT(*) FROM idem_outbox WHERE published_at IS NULL"); got != n/2 {
		t.Errorf("the outbox holds %d pending copies, want %d", got, n/2)
	}
}
