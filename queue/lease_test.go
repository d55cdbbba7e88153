package queue_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/inbox"
	"github.com/idemhq/idem/queue"
)

// ledgerTable makes the table the tests' handlers write their effects to: no
// unique key, so an effect applied twice shows as two rows.
func ledgerTable(t *testing.T, d *database) {
	t.Helper()
	d.exec(t, "CREATE TABLE ledger (id VARCHAR(100) NOT NULL, by_worker VARCHAR(100) NOT NULL)")
}

// writeLedger is a handler that records its message in the ledger as by.
func writeLedger(by string) inbox.Handler[*sql.Tx] {
	return func(ctx context.Context, tx *sql.Tx, m idem.Message) error {
		_, err := tx.ExecContext(ctx, "INSERT INTO ledger (id, by_worker) VALUES ($1, $2)", m.ID, by)
		return err
	}
}

// startInbox runs an inbox consumer of src on d until the test ends.
func startInbox(t *testing.T, d *database, src idem.Source, handle inbox.Handler[*sql.Tx], cfg inbox.Config) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cfg.Consumer = cmpOr(cfg.Consumer, "ledger")
	if cfg.Logger == nil {
		cfg.Logger = quiet
	}
	con, err := inbox.New(ctx, src, d.tx, d.store, handle, cfg)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); con.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// enqueue writes jobs in a transaction of their own.
func enqueue(t testing.TB, d *database, q *queue.Queue[*sql.Tx], jobs ...queue.Job) []queue.Enqueued {
	t.Helper()
	var res []queue.Enqueued
	err := d.tx.InTx(context.Background(), func(tx *sql.Tx) (err error) {
		res, err = q.InsertTx(context.Background(), tx, jobs...)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func job(topic, id, key string) queue.Job {
	return queue.Job{Message: idem.Message{ID: id, Topic: topic, OrderingKey: key, Payload: []byte("payload of " + id)}}
}

// qrow is the newest row of a topic and msg_id.
type qrow struct {
	attempts           int
	outcome, lastError string
	leasedBy           string
	finished           bool
}

func rowOf(t testing.TB, d *database, topic, id string) (r qrow, ok bool) {
	t.Helper()
	var fin sql.NullInt64
	err := d.db.QueryRowContext(context.Background(), `SELECT attempts, outcome, last_error, leased_by, finished_at FROM idem_queue
		WHERE topic = $1 AND msg_id = $2 ORDER BY id DESC LIMIT 1`, topic, id).Scan(&r.attempts, &r.outcome, &r.lastError, &r.leasedBy, &fin)
	if errors.Is(err, sql.ErrNoRows) {
		return r, false
	}
	if err != nil {
		t.Fatalf("%s: reading row %s/%s: %v", d.kind, topic, id, err)
	}
	r.finished = fin.Valid
	return r, true
}

func mustRow(t testing.TB, d *database, topic, id string) qrow {
	t.Helper()
	r, ok := rowOf(t, d, topic, id)
	if !ok {
		t.Fatalf("no row %s/%s", topic, id)
	}
	return r
}

// TestLeaseLostRollsBack: consumer A's handler is blocked when its Source
// stops (its lease given up, as a Source whose process stops loses it after
// Lease); consumer B takes the message over (attempts 2) and applies it; A's
// handler then returns, but its transaction cannot retire the row (its
// attempts is stale) and rolls back with its effect: the ledger has one row,
// B's. On SQLite one transaction holds the whole database, so B can only claim
// while A is outside its transaction: there A claims, loses the row to B, and
// then fails to settle it in its own transaction.
func TestLeaseLostRollsBack(t *testing.T) {
	for _, kind := range kinds {
		t.Run(kind, func(t *testing.T) {
			d := openDB(t, kind)
			ledgerTable(t, d)
			q := newQueue(t, d, queue.Config{})
			enqueue(t, d, q, job("jobs", "m1", ""))
			a := newSource(t, q, queue.SourceConfig{Topic: "jobs", Worker: "A"})
			applied := func() bool { r := mustRow(t, d, "jobs", "m1"); return r.outcome == "applied" }

			if kind == "sqlite" {
				ds, err := a.Receive(context.Background(), 1)
				if err != nil || len(ds) != 1 || ds[0].Attempt != 1 {
					t.Fatalf("A received %v, %v", ds, err)
				}
				a.Close()
				b := newSource(t, q, queue.SourceConfig{Topic: "jobs", Worker: "B"})
				bs, err := b.Receive(context.Background(), 1)
				if err != nil || len(bs) != 1 || bs[0].Attempt != 2 {
					t.Fatalf("B received %v, %v; want the message at attempt 2", bs, err)
				}
				settle := func(by string, s *queue.Source[*sql.Tx], ds []idem.Delivery) error {
					return d.tx.InTx(context.Background(), func(tx *sql.Tx) error {
						if err := writeLedger(by)(context.Background(), tx, ds[0].Message); err != nil {
							return err
						}
						return s.SettleTx(context.Background(), tx, ds, []string{"applied"})
					})
				}
				if err := settle("A", a, ds); !errors.Is(err, queue.ErrLeaseLost) {
					t.Fatalf("A's SettleTx while B holds the message: %v, want ErrLeaseLost", err)
				}
				if err := settle("B", b, bs); err != nil {
					t.Fatalf("B's SettleTx: %v", err)
				}
			} else {
				entered, release := make(chan struct{}), make(chan struct{})
				var once sync.Once
				var aReturned atomic.Bool
				startInbox(t, d, a, func(ctx context.Context, tx *sql.Tx, m idem.Message) error {
					once.Do(func() { close(entered) })
					<-release
					defer aReturned.Store(true)
					return writeLedger("A")(ctx, tx, m)
				}, inbox.Config{})
				<-entered
				a.Close() // A stops: its lease is given up while its handler runs
				b := newSource(t, q, queue.SourceConfig{Topic: "jobs", Worker: "B"})
				startInbox(t, d, b, writeLedger("B"), inbox.Config{})
				eventually(t, "B claims the message (attempts 2)", func() bool { return mustRow(t, d, "jobs", "m1").attempts == 2 })
				close(release)
				eventually(t, "A's handler returns", aReturned.Load)
				eventually(t, "B applies the message", applied)
			}
			if r := mustRow(t, d, "jobs", "m1"); r.attempts != 2 || r.outcome != "applied" {
				t.Errorf("row: %+v, want applied at attempt 2", r)
			}
			var by []string
			rows, err := d.db.Query("SELECT by_worker FROM ledger")
			if err != nil {
				t.Fatal(err)
			}
			for rows.Next() {
				var s string
				rows.Scan(&s)
				by = append(by, s)
			}
			rows.Close()
			if fmt.Sprint(by) != "[B]" {
				t.Errorf("ledger written by %v, want [B] alone: A's transaction must roll back", by)
			}
		})
	}
}

// TestRenewedLeaseIsKept: a message whose Source keeps renewing its lease
// stays that Source's however long its handler takes: another Source polls
// many times while the lease is renewed past its first end, and gets nothing;
// the first then settles it.
func TestRenewedLeaseIsKept(t *testing.T) {
	for _, kind := range kinds {
		t.Run(kind, func(t *testing.T) {
			d := openDB(t, kind)
			q := newQueue(t, d, queue.Config{})
			enqueue(t, d, q, job("jobs", "slow", ""))
			// A lease long enough that a loaded machine still renews it in time
			// (every 500 ms, with a second to spare), short enough that the four
			// renewals below outlast it.
			a := newSource(t, q, queue.SourceConfig{Topic: "jobs", Worker: "A", Lease: 15 * queue.MinLease})
			b := newSource(t, q, queue.SourceConfig{Topic: "jobs", Worker: "B", MinPollInterval: time.Millisecond, PollInterval: 5 * time.Millisecond})
			ds, err := a.Receive(context.Background(), 1)
			if err != nil || len(ds) != 1 {
				t.Fatalf("A received %v, %v", ds, err)
			}
			// The handler waits; meanwhile B polls, and the lease's end moves.
			seen := map[int64]bool{}
			polls := 0
			deadline := time.Now().Add(waitLong)
			for len(seen) < 5 || polls < 50 {
				if time.Now().After(deadline) {
					t.Fatalf("after %v: %d renewals seen, %d polls", waitLong, len(seen), polls)
				}
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
				got, err := b.Receive(ctx, 1)
				cancel()
				if len(got) > 0 {
					t.Fatalf("B took the message A holds and renews (after %d renewals): %+v", len(seen), got[0])
				}
				if err != nil && !errors.Is(err, context.DeadlineExceeded) {
					t.Logf("B's poll: %v", err)
				}
				polls++
				var until int64
				if err := d.db.QueryRow("SELECT available_at FROM idem_queue WHERE msg_id = 'slow'").Scan(&until); err != nil {
					t.Fatal(err)
				}
				seen[until] = true
			}
			err = d.tx.InTx(context.Background(), func(tx *sql.Tx) error {
				return a.SettleTx(context.Background(), tx, ds, []string{"applied"})
			})
			if err != nil {
				t.Fatalf("A settles after %d renewals: %v", len(seen), err)
			}
			if r := mustRow(t, d, "jobs", "slow"); r.attempts != 1 || r.outcome != "applied" || r.leasedBy != "" {
				t.Errorf("row: %+v, want applied at attempt 1", r)
			}
		})
	}
}
