package queue_test

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/queue"
)

// TestPrefetch: with SourceConfig.Prefetch, a Receive that returned messages
// leaves the next batch claimed in the background; the next Receive returns
// exactly it, in id order, and Close puts back what was handed out or
// prefetched and not settled, for another Source (nothing waits for a lease to
// run out: the lease here is an hour).
func TestPrefetch(t *testing.T) {
	for _, kind := range kinds {
		t.Run(kind, func(t *testing.T) {
			ctx := context.Background()
			d := openDB(t, kind)
			q := newQueue(t, d, queue.Config{})
			var want []string
			err := d.tx.InTx(ctx, func(tx *sql.Tx) error {
				for i := range 6 {
					want = append(want, fmt.Sprintf("m%d", i))
					if _, err := q.EnqueueTx(ctx, tx, idem.Message{ID: want[i], Topic: "orders", Payload: []byte("x")}); err != nil {
						return err
					}
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			src, err := q.Source(queue.SourceConfig{Topic: "orders", Lease: time.Hour, Prefetch: true})
			if err != nil {
				t.Fatal(err)
			}
			defer src.Close()
			ids := func(ds []idem.Delivery) []string {
				var out []string
				for _, d := range ds {
					out = append(out, d.ID)
				}
				return out
			}
			first, err := src.Receive(ctx, 2)
			if err != nil {
				t.Fatal(err)
			}
			if got := ids(first); !slices.Equal(got, want[:2]) {
				t.Fatalf("first Receive: %v, want %v", got, want[:2])
			}
			leased := func() int {
				return d.count(t, "SELECT count(*) FROM idem_queue WHERE leased_by <> '' AND attempts = 1")
			}
			eventually(t, "the next batch prefetched", func() bool { return leased() == 4 })
			second, err := src.Receive(ctx, 2)
			if err != nil {
				t.Fatal(err)
			}
			if got := ids(second); !slices.Equal(got, want[2:4]) {
				t.Fatalf("second Receive: %v, want the prefetched %v", got, want[2:4])
			}
			if err := first[0].Settler.Ack(ctx); err != nil {
				t.Fatal(err)
			}
			eventually(t, "the third batch prefetched", func() bool { return leased() == 5 })
			if err := src.Close(); err != nil {
				t.Fatal(err)
			}
			if got := d.count(t, "SELECT count(*) FROM idem_queue WHERE finished_at IS NULL AND leased_by = ''"); got != 5 {
				t.Fatalf("after Close: %d unfinished rows put back, want 5 (3 handed out unsettled, 2 prefetched)", got)
			}
			other := newSource(t, q, queue.SourceConfig{Topic: "orders", Lease: time.Hour})
			var rest []idem.Delivery
			for len(rest) < 5 {
				ds, err := other.Receive(ctx, 10)
				if err != nil {
					t.Fatal(err)
				}
				rest = append(rest, ds...)
			}
			if got := ids(rest); !slices.Equal(got, want[1:]) {
				t.Fatalf("another Source received %v, want %v", got, want[1:])
			}
			for _, d := range rest {
				if d.Attempt != 2 {
					t.Errorf("%s: attempt %d, want 2 (the first claim counted)", d.ID, d.Attempt)
				}
			}
		})
	}
}
