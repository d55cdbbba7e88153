package queue_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/queue"
)

// The lease's faults, driven by progress: a Source halted as a crashed process
// (Halt), one paused (PauseRenewals), and one whose settle failed. In each, the
// message must come to another Source once the lease ran out, and the first
// Source's settle of it must then fail with ErrLeaseLost.

const shortLease = 300 * time.Millisecond

// oneMessage enqueues one message on a fresh queue and returns the queue and two
// Sources of its topic.
func oneMessage(t *testing.T, d *database) (*queue.Queue[*sql.Tx], *queue.Source[*sql.Tx], *queue.Source[*sql.Tx]) {
	t.Helper()
	ctx := context.Background()
	q := newQueue(t, d, queue.Config{})
	if err := d.tx.InTx(ctx, func(tx *sql.Tx) error {
		_, err := q.EnqueueTx(ctx, tx, idem.Message{ID: "m1", Topic: "hooks", Payload: []byte("x")})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	cfg := queue.SourceConfig{Topic: "hooks", Lease: shortLease, PollInterval: 20 * time.Millisecond}
	cfg.Worker = "a"
	a := newSource(t, q, cfg)
	cfg.Worker = "b"
	return q, a, newSource(t, q, cfg)
}

// receiveOne waits for s to claim the message.
func receiveOne(t *testing.T, s *queue.Source[*sql.Tx]) idem.Delivery {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitLong)
	defer cancel()
	ds, err := s.Receive(ctx, 10)
	if err != nil || len(ds) != 1 {
		t.Fatalf("receive: %d deliveries, %v; want the message", len(ds), err)
	}
	return ds[0]
}

// takenOver waits until b has claimed the message a holds (its second attempt),
// polling b: it only gets it once a's lease ran out.
func takenOver(t *testing.T, b *queue.Source[*sql.Tx]) idem.Delivery {
	t.Helper()
	d := receiveOne(t, b)
	if d.ID != "m1" || d.Attempt != 2 {
		t.Fatalf("b claimed %s attempt %d; want m1, attempt 2", d.ID, d.Attempt)
	}
	return d
}

func TestHaltLeavesTheLeasesToRunOut(t *testing.T) {
	for _, kind := range kinds {
		t.Run(kind, func(t *testing.T) {
			d := openDB(t, kind)
			_, a, b := oneMessage(t, d)
			da := receiveOne(t, a)
			a.Halt()
			if err := a.Close(); err != nil {
				t.Fatal(err)
			}
			// Nothing was put back: the row is still a's, until its lease ends.
			if n := d.count(t, "SELECT COUNT(*) FROM idem_queue WHERE msg_id = 'm1' AND leased_by = 'a'"); n != 1 {
				t.Fatalf("after Halt and Close, %d rows leased by a; want the message still leased (a crash puts nothing back)", n)
			}
			db := takenOver(t, b)
			if err := da.Settler.Ack(context.Background()); !errors.Is(err, queue.ErrLeaseLost) {
				t.Fatalf("the halted Source's ack after the takeover: %v; want ErrLeaseLost", err)
			}
			if err := db.Settler.Ack(context.Background()); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestPauseRenewalsLosesTheLease(t *testing.T) {
	for _, kind := range kinds {
		t.Run(kind, func(t *testing.T) {
			ctx := context.Background()
			d := openDB(t, kind)
			_, a, b := oneMessage(t, d)
			da := receiveOne(t, a)
			resume := a.PauseRenewals()
			takenOver(t, b)
			resume()
			resume() // twice is once
			err := d.tx.InTx(ctx, func(tx *sql.Tx) error {
				return a.SettleTx(ctx, tx, []idem.Delivery{da}, []string{idemsql.QueueApplied})
			})
			if !errors.Is(err, queue.ErrLeaseLost) {
				t.Fatalf("the paused Source's SettleTx after the takeover: %v; want ErrLeaseLost", err)
			}
		})
	}
}

// A Nak that fails (here: its context ended) stops the renewals: the message
// comes again after the lease, as a broker redelivers a message whose settle
// failed, instead of staying the Source's for as long as it lives.
func TestFailedSettleLetsTheLeaseRunOut(t *testing.T) {
	for _, kind := range kinds {
		t.Run(kind, func(t *testing.T) {
			d := openDB(t, kind)
			_, a, b := oneMessage(t, d)
			da := receiveOne(t, a)
			done, cancel := context.WithCancel(context.Background())
			cancel()
			if err := da.Settler.Nak(done, 0); err == nil {
				t.Fatal("Nak with an ended context succeeded")
			}
			takenOver(t, b)
		})
	}
}
