package idemmem_test

import (
	"context"
	"fmt"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemmem"
)

// TestUntracedStartsNoSpan: a store without a provider (the global one unset) or
// with a no-op one starts no span, even under a caller's recording span: only the
// caller's span is exported.
func TestUntracedStartsNoSpan(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	defer tp.Shutdown(context.Background())
	for _, cfg := range []idemmem.Config{{}, {TracerProvider: noop.NewTracerProvider()}} {
		s, err := idemmem.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		exp.Reset()
		ctx, root := tp.Tracer("t").Start(context.Background(), "caller")
		k := idem.Key{Scope: "s", ID: "k"}
		r, _ := s.Claim(ctx, idem.Claim{Key: k})
		_ = s.Complete(ctx, k, r.Token, nil)
		_, _ = s.ClaimBatch(ctx, []idem.Claim{{Key: k}})
		_ = s.Release(ctx, k, r.Token)
		root.End()
		if got := exp.GetSpans(); len(got) != 1 || got[0].Name != "caller" {
			t.Errorf("with %T, spans %v were exported, want only the caller's", cfg.TracerProvider, got.Snapshots())
		}
	}
}

// TestUntracedCallsAllocateNothing: with no TracerProvider (none in Config, the
// global one unset: nothing in this test binary sets it), a claim of a completed
// key, and a claim, complete and release of a new one, allocate nothing, as before
// the stores were traced (0 and 0 at commit 7744c4d).
func TestUntracedCallsAllocateNothing(t *testing.T) {
	s, err := idemmem.New(idemmem.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	done := idem.Key{Scope: "s", ID: "done"}
	r, _ := s.Claim(ctx, idem.Claim{Key: done})
	if err := s.Complete(ctx, done, r.Token, nil); err != nil {
		t.Fatal(err)
	}
	if n := testing.AllocsPerRun(1000, func() { _, _ = s.Claim(ctx, idem.Claim{Key: done}) }); n != 0 {
		t.Errorf("a duplicate claim allocates %v times, want 0", n)
	}
	keys := make([]idem.Key, 2000)
	for i := range keys {
		keys[i] = idem.Key{Scope: "s", ID: fmt.Sprint("k-", i)}
	}
	i := 0
	n := testing.AllocsPerRun(1000, func() {
		r, _ := s.Claim(ctx, idem.Claim{Key: keys[i]})
		_ = s.Complete(ctx, keys[i], r.Token, nil)
		_ = s.Release(ctx, keys[i], r.Token)
		i++
	})
	if n != 0 {
		t.Errorf("a claim, complete and release allocate %v times, want 0", n)
	}
}
