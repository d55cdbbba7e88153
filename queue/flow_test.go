package queue_test

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"testing"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/inbox"
	"github.com/idemhq/idem/queue"
)

// TestFlow: producers enqueue in their transactions, three consumers on the
// same database apply each message once, in the transaction that retires it;
// one ordering key's messages apply in order; with and without Prefetch.
func TestFlow(t *testing.T) {
	for _, kind := range kinds {
		for _, prefetch := range []bool{false, true} {
			name := kind
			if prefetch {
				name += "/prefetch"
			}
			t.Run(name, func(t *testing.T) { testFlow(t, kind, prefetch) })
		}
	}
}

func testFlow(t *testing.T, kind string, prefetch bool) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	d := openDB(t, kind)
	d.exec(t, "CREATE TABLE ledger (id VARCHAR(100) PRIMARY KEY, k VARCHAR(10) NOT NULL, seq INTEGER NOT NULL)")
	q := newQueue(t, d, queue.Config{})
	const n = 300
	var wg sync.WaitGroup
	for p := range 3 {
		wg.Go(func() {
			for i := p; i < n; i += 3 {
				err := d.tx.InTx(ctx, func(tx *sql.Tx) error {
					_, err := q.EnqueueTx(ctx, tx, idem.Message{ID: fmt.Sprintf("m%04d", i), Topic: "orders",
						OrderingKey: fmt.Sprintf("p%d-k%d", p, i%2), Payload: []byte(fmt.Sprint(i))})
					return err
				})
				if err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	var mu sync.Mutex
	last := map[string]int{}
	outOfOrder := 0
	handle := func(ctx context.Context, tx *sql.Tx, m idem.Message) error {
		var seq int
		fmt.Sscan(string(m.Payload), &seq)
		_, err := tx.ExecContext(ctx, "INSERT INTO ledger (id, k, seq) VALUES ($1, $2, $3)", m.ID, m.OrderingKey, seq)
		if err == nil {
			mu.Lock()
			if prev, ok := last[m.OrderingKey]; ok && prev > seq {
				outOfOrder++
			}
			last[m.OrderingKey] = seq
			mu.Unlock()
		}
		return err
	}
	for c := range 3 {
		src := newSource(t, q, queue.SourceConfig{Topic: "orders", Prefetch: prefetch})
		con, err := inbox.New(ctx, src, d.tx, d.store, handle, inbox.Config{Consumer: "ledger", BatchSize: 16, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		_ = c
		go con.Run(ctx)
	}
	eventually(t, "every message applied", func() bool { return d.count(t, "SELECT count(*) FROM ledger") == n })
	eventually(t, "every row retired", func() bool {
		return d.count(t, "SELECT count(*) FROM idem_queue WHERE outcome = 'applied'") == n
	})
	if got := d.count(t, "SELECT count(*) FROM idem_queue WHERE finished_at IS NULL"); got != 0 {
		t.Errorf("%d unfinished rows", got)
	}
	mu.Lock()
	defer mu.Unlock()
	if outOfOrder != 0 {
		t.Errorf("%d messages applied before an earlier one of their key", outOfOrder)
	}
}
