package outbox_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemsqlite"
	"github.com/idemhq/idem/idemtest"
	"github.com/idemhq/idem/internal/testsvc"
	"github.com/idemhq/idem/outbox"
)

// countSink counts the publications of each message id.
type countSink struct {
	mu sync.Mutex
	n  map[string]int
}

func (s *countSink) Publish(_ context.Context, msgs ...idem.Message) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, m := range msgs {
		s.n[m.ID]++
	}
	return nil
}

func (s *countSink) count(id string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n[id]
}

func (s *countSink) total() (published, doubled int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, n := range s.n {
		published += n
		doubled += n - 1
	}
	return published, doubled
}

// roundFailures reads idem_relay_round_failures_total from reg.
func roundFailures(t *testing.T, reg *prometheus.Registry) float64 {
	t.Helper()
	return idemtest.MetricSum(t, reg, "idem_relay_round_failures_total", nil)
}

// TestFullDisk runs orders (an order row and its outbox message in one
// transaction) and a relay against a database whose disk fills, on SQLite (the
// file on a small tmpfs) and on PostgreSQL (the tables in a tablespace on one),
// until the disk refuses the orders. Checked: an order whose transaction failed
// is neither stored nor published; every order that committed is published, none
// lost; the relay neither exits nor spins (its failed rounds back off) and publishes the
// orders stored before the disk filled; and once
// space returns, the same outbox takes orders and the relay catches up, without a
// restart.
func TestFullDisk(t *testing.T) {
	t.Parallel()
	t.Run("sqlite", func(t *testing.T) {
		t.Parallel()
		disk := testsvc.NewSmallDisk(t, 2<<20)
		db, err := sql.Open("sqlite", idemsqlite.DSN(filepath.Join(disk.Dir, "outbox.db"), idemsqlite.Config{}))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		fullDiskOutbox(t, newEnv(t, "sqlite", db), disk)
	})
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		disk := testsvc.NewSmallDisk(t, 2<<20)
		db, err := sql.Open("pgx", testsvc.PostgresOnSmallDisk(t, disk))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		fullDiskOutbox(t, newEnv(t, "postgres", db), disk)
	})
}

func fullDiskOutbox(t *testing.T, e env, disk *testsvc.SmallDisk) {
	const batch, roundBatches = 20, 2
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sink := &countSink{n: map[string]int{}}
	reg := prometheus.NewRegistry()
	r, err := e.ob.Relay(sink, outbox.RelayConfig{BatchSize: batch, RoundBatches: roundBatches,
		PollInterval: 50 * time.Millisecond, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	disk.FillLeaving(t, 256<<10)
	var acked, refused []string
	for i, inARow := 0, 0; inARow < 10; i++ {
		if i == 100_000 {
			t.Fatal("100,000 orders fitted on the small disk: it never filled")
		}
		id := fmt.Sprintf("o%06d", i)
		err := placeOrder(ctx, e, id, fmt.Sprint("k", i%4), true)
		if err == nil {
			acked = append(acked, id)
			inARow = 0
			continue
		}
		if msg := err.Error(); !strings.Contains(msg, "full") && !strings.Contains(msg, "No space left on device") {
			t.Fatalf("order %s on a full disk: %v; want an error that says the disk is full", id, err)
		}
		if len(refused) == 0 {
			t.Logf("%s: first refusal, after %d orders: %v", e.name, len(acked), err)
		}
		refused = append(refused, id)
		inARow++
	}
	if len(acked) == 0 {
		t.Fatal("no order committed before the disk filled: the ballast left no room")
	}
	if e.name == "sqlite" {
		// The same order through the TxDB (its Begin, Exec and Commit, as the inbox's
		// batch and the queue's producers run them): the disk's refusal, wherever it
		// comes, is said in idem's words and matches idemsqlite.ErrDiskFull.
		err := e.tx.InTx(ctx, func(tx *sql.Tx) error {
			if _, err := e.tx.Querier(tx).Exec(ctx, "INSERT INTO orders (id) VALUES ($1)", "via-txdb"); err != nil {
				return err
			}
			_, err := e.ob.EnqueueTx(ctx, tx, idem.Message{ID: "via-txdb", Topic: "orders", OrderingKey: "k0", Payload: []byte("via-txdb")})
			return err
		})
		if !errors.Is(err, idemsqlite.ErrDiskFull) || !strings.Contains(err.Error(), "free space on the volume of the database, nothing of this transaction was stored") {
			t.Fatalf("an order in a TxDB transaction on the full disk = %v; want an error matching idemsqlite.ErrDiskFull that names the fix", err)
		}
		t.Logf("%s: an order through the TxDB on the full disk: %v", e.name, err)
		refused = append(refused, "via-txdb")
	}

	// The relay starts on the full disk, with every committed order waiting. It may
	// publish them all (marking can fit in pages, or WAL frames, already allocated)
	// or fail its rounds for want of space: then they must back off (50 ms
	// doubling), not spin. The bound holds on any machine: a slow one runs fewer.
	fullAt := time.Now()
	runCtx, stop := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() { ran <- r.Run(runCtx) }()
	defer func() {
		stop()
		if err := <-ran; err != context.Canceled {
			t.Errorf("relay Run = %v, want context.Canceled", err)
		}
	}()
	testsvc.Eventually(t, time.Minute, "6 failed relay rounds on the full disk, or every order published and marked", func() bool {
		if roundFailures(t, reg) >= 6 {
			return true
		}
		stall, err := r.Stall(ctx)
		return err == nil && stall == 0 && allPublished(sink, acked)
	})
	// Every failed round is followed by at least 50 ms of backoff: n failures take
	// (n-1)*50 ms or more. A relay that spins fails its rounds back to back.
	failed, elapsed := roundFailures(t, reg), time.Since(fullAt)
	if limit := 1 + float64(elapsed/(40*time.Millisecond)); failed > limit {
		t.Fatalf("the relay failed %v rounds in %v on the full disk: it spins instead of backing off", failed, elapsed)
	}
	stall, stallErr := r.Stall(ctx)
	pub, dup := sink.total()
	t.Logf("%s: %d orders committed, %d refused; while full: %v failed rounds in %v, stall %v (err %v); %d publications so far, %d of them doubles",
		e.name, len(acked), len(refused), failed, elapsed.Round(time.Millisecond), stall.Round(time.Millisecond), stallErr, pub, dup)

	disk.Free(t) // space returns: the same outbox and relay, no restart
	if err := placeOrder(ctx, e, "after", "k0", true); err != nil {
		t.Fatalf("order after space returned: %v", err)
	}
	acked = append(acked, "after")
	testsvc.Eventually(t, time.Minute, "every committed order published", func() bool { return allPublished(sink, acked) })
	for _, id := range refused {
		if n := sink.count(id); n != 0 {
			t.Fatalf("order %s was refused (its transaction failed) but was published %d times", id, n)
		}
	}
	var stored int
	if err := e.db.QueryRowContext(ctx, "SELECT COUNT(*) FROM orders").Scan(&stored); err != nil || stored != len(acked) {
		t.Fatalf("%d orders stored (err %v), want the %d committed", stored, err, len(acked))
	}
	pub, dup = sink.total()
	// A round that published and then could not mark publishes its messages again
	// in a later round. After a failed round the relay reads one message a round
	// (doubling as rounds commit again), so a series of failed rounds doubles one
	// full round and then about one message each, not a full round each.
	if failedAll := int(roundFailures(t, reg)); dup > batch*roundBatches+4*failedAll {
		t.Fatalf("%d doubled publications over %d failed rounds: more than one round (%d messages) and a few per failed round after it",
			dup, failedAll, batch*roundBatches)
	}
	t.Logf("%s: after recovery %d publications of %d orders: lost 0, doubled %d (the consumers' inbox drops them)", e.name, pub, len(acked), dup)
}

func allPublished(sink *countSink, ids []string) bool {
	for _, id := range ids {
		if sink.count(id) == 0 {
			return false
		}
	}
	return true
}
