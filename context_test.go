package idem_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/idemhq/idem"
)

func TestKeyLineage(t *testing.T) {
	if _, ok := idem.KeyFrom(context.Background()); ok {
		t.Fatal("a bare context carries a lineage")
	}
	if k, ok := idem.KeyFrom(idem.WithKey(context.Background(), "k1")); !ok || k != "k1" {
		t.Fatalf("WithKey: %q, %v", k, ok)
	}
	var calls atomic.Int32
	ctx := idem.WithKeyFunc(context.Background(), func() string { calls.Add(1); return "derived" })
	if calls.Load() != 0 {
		t.Fatal("WithKeyFunc computed the lineage before anyone asked")
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			if k, ok := idem.KeyFrom(ctx); !ok || k != "derived" {
				t.Errorf("KeyFrom: %q, %v", k, ok)
			}
		})
	}
	wg.Wait()
	if calls.Load() != 1 {
		t.Fatalf("the lineage was computed %d times, want once", calls.Load())
	}
	if _, ok := idem.KeyFrom(idem.WithKeyFunc(context.Background(), func() string { return "" })); ok {
		t.Fatal("an empty lineage counts as one")
	}
}
