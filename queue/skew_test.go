package queue_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/chaos"
	"github.com/idemhq/idem/queue"
)

// Two consumers whose clocks disagree share one queue. The queue takes its
// callers' clock (Config.Now, on every database): a lease ends when the claimer's
// clock passes the available_at the holder wrote on its own, so a consumer D ahead
// reckons another's lease D shorter. Within the lease it leaves A's message alone;
// beyond it, it claims the message A still works on, and A's settle fails with
// ErrLeaseLost (its transaction, and its effect, roll back).
func TestClockSkewBetweenConsumers(t *testing.T) {
	const lease = time.Minute
	for _, kind := range kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			for _, tc := range []struct {
				name     string
				skew     time.Duration // B ahead of A
				takeover bool
			}{
				{"within_lease", lease / 2, false},
				{"beyond_lease", lease + lease/2, true},
			} {
				t.Run(tc.name, func(t *testing.T) {
					ctx := context.Background()
					d := openDB(t, kind)
					clockA, clockB := &chaos.Clock{}, &chaos.Clock{}
					clockA.Jump(-tc.skew / 2)
					clockB.Jump(tc.skew - tc.skew/2)
					qa, qb := newQueue(t, d, queue.Config{Now: clockA.Now}), newQueue(t, d, queue.Config{Now: clockB.Now})
					enqueue(t, d, qa, job("jobs", "m1", ""))
					a := newSource(t, qa, queue.SourceConfig{Topic: "jobs", Worker: "A", Lease: lease})
					held, err := a.Receive(ctx, 1)
					if err != nil || len(held) != 1 {
						t.Fatalf("A received %v, %v", held, err)
					}
					// m2 is due for anyone: B's claim returns with it, and with m1 too
					// (one statement, in id order) if A's lease has ended on B's clock.
					enqueue(t, d, qa, job("jobs", "m2", ""))
					b := newSource(t, qb, queue.SourceConfig{Topic: "jobs", Worker: "B", Lease: lease})
					got, err := b.Receive(ctx, 2)
					if err != nil {
						t.Fatal(err)
					}
					var ids []string
					for _, dl := range got {
						ids = append(ids, dl.Message.ID)
					}
					want := []string{"m2"}
					if tc.takeover {
						want = []string{"m1", "m2"}
					}
					if len(ids) != len(want) || ids[0] != want[0] {
						t.Fatalf("B, %v ahead, claimed %v; want %v", tc.skew, ids, want)
					}
					err = d.tx.InTx(ctx, func(tx *sql.Tx) error { return a.SettleTx(ctx, tx, held, []string{"applied"}) })
					if tc.takeover != errors.Is(err, idem.ErrLeaseLost) || !tc.takeover && err != nil {
						t.Fatalf("A's settle after B's claim: %v (takeover %v)", err, tc.takeover)
					}
					if r := mustRow(t, d, "jobs", "m1"); tc.takeover == r.finished {
						t.Errorf("m1 after A's settle: %+v", r)
					}
				})
			}
		})
	}
}
