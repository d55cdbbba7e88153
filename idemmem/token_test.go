package idemmem_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemmem"
)

// A compact (dedup-only) completed record keeps its holder's whole token: a stale
// holder whose token shares the low 32 bits with the completer's is still fenced.
func TestCompactRecordKeepsWholeToken(t *testing.T) {
	t.Parallel()
	var now atomic.Int64
	now.Store(time.Date(2026, 11, 23, 0, 0, 0, 0, time.UTC).UnixNano())
	s := newStore(t, idemmem.Config{Now: func() time.Time { return time.Unix(0, now.Load()) }})
	ctx := context.Background()
	k := idem.Key{Scope: "s", ID: "k"}

	x, err := s.Claim(ctx, idem.Claim{Key: k, Lease: time.Second})
	if err != nil || x.Outcome != idem.Acquired {
		t.Fatalf("claim x: %v %v", x, err)
	}
	now.Add(int64(1<<32) * int64(time.Microsecond)) // tokens count microseconds
	y, err := s.Claim(ctx, idem.Claim{Key: k, Lease: time.Second})
	if err != nil || y.Outcome != idem.Acquired {
		t.Fatalf("claim y: %v %v", y, err)
	}
	if y.Token-x.Token != 1<<32 {
		t.Fatalf("test setup: tokens %d and %d are not 2^32 apart", x.Token, y.Token)
	}
	if err := s.Complete(ctx, k, y.Token, nil); err != nil {
		t.Fatal(err)
	}
	if err := s.Complete(ctx, k, x.Token, nil); !errors.Is(err, idem.ErrLeaseLost) {
		t.Fatalf("stale Complete: got %v, want ErrLeaseLost", err)
	}
	if err := s.Release(ctx, k, x.Token); !errors.Is(err, idem.ErrLeaseLost) {
		t.Fatalf("stale Release: got %v, want ErrLeaseLost", err)
	}
	if err := s.Renew(ctx, k, x.Token, time.Second); !errors.Is(err, idem.ErrLeaseLost) {
		t.Fatalf("stale Renew: got %v, want ErrLeaseLost", err)
	}
	if err := s.Complete(ctx, k, y.Token, nil); err != nil {
		t.Fatalf("second Complete by the holder: %v", err)
	}
	if err := s.Release(ctx, k, y.Token); !errors.Is(err, idem.ErrCompleted) {
		t.Fatalf("Release by the completer: got %v, want ErrCompleted", err)
	}
}
