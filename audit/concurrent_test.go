package audit_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/idemhq/idem/audit"
)

// Two audits repairing at once (idem audit --every --repair beside an operator's
// repair from the console) republish each missing message once: the original
// row's lock makes them take turns, and the second finds the first one's repair.
func TestConcurrentRepairsCopyOnce(t *testing.T) { forEachKind(t, testConcurrentRepairs) }

func testConcurrentRepairs(t *testing.T, kind string) {
	const n, auditors = 200, 4
	ctx := context.Background()
	prod, cons := openDB(t, kind), openDB(t, "sqlite")
	base := time.Now().Add(-10 * time.Minute).UnixMilli()
	seedPublished(t, prod, "orders", n, base, func(i int) int64 { return base + int64(i) })
	applyKeys(t, cons, "ledger", n, func(i int) bool { return i%2 == 0 }) // the consumer got the even ones
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
