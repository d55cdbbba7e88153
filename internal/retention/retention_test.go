package retention_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/internal/retention"
)

// Batches runs batches until one comes back short, stops at the first error with
// what was deleted so far, and does not start one after ctx ended.
func TestBatches(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	left := 25
	n, err := retention.Batches(ctx, 10, func() (int, error) { d := min(left, 10); left -= d; return d, nil })
	if n != 25 || err != nil || left != 0 {
		t.Fatalf("Batches over 25 rows = %d, %v (%d left); want 25, nil", n, err, left)
	}
	boom := errors.New("boom")
	calls := 0
	n, err = retention.Batches(ctx, 10, func() (int, error) {
		calls++
		if calls == 2 {
			return 0, boom
		}
		return 10, nil
	})
	if n != 10 || !errors.Is(err, boom) {
		t.Fatalf("Batches failing at the second batch = %d, %v; want 10, boom", n, err)
	}
	done, cancel := context.WithCancel(ctx)
	cancel()
	if n, err := retention.Batches(done, 10, func() (int, error) { t.Error("a batch ran after ctx ended"); return 0, nil }); n != 0 || err == nil {
		t.Fatalf("Batches after ctx ended = %d, %v", n, err)
	}
}

// New applies the defaults and refuses a retention below the minimum and a batch
// out of bounds, naming the field.
func TestNew(t *testing.T) {
	t.Parallel()
	l := retention.Limits{Default: time.Hour, Min: time.Minute, DefaultBatch: 5, Batch: 50, Rows: "rows", Fix: "keep them"}
	s, err := retention.New(l, 0, 0, nil, nil, "test")
	if err != nil || s.Retention != time.Hour || s.Batch != 5 || s.Now == nil {
		t.Fatalf("New with zero settings = %+v, %v; want the defaults", s, err)
	}
	for _, tc := range []struct {
		retention time.Duration
		batch     int
		field     string
	}{{time.Second, 0, "SweepConfig.Retention"}, {0, -1, "SweepConfig.Batch"}, {0, 51, "SweepConfig.Batch"}} {
		var ie *idem.InputError
		if _, err := retention.New(l, tc.retention, tc.batch, nil, nil, "test"); !errors.As(err, &ie) || ie.Field != tc.field {
			t.Errorf("New(%v, %d) = %v, want an *idem.InputError on %s", tc.retention, tc.batch, err, tc.field)
		}
	}
}
