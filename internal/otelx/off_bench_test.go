package otelx_test

import (
	"context"
	"testing"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/internal/otelx"
)

// BenchmarkOff: the check every component makes before tracing a step.
func BenchmarkOff(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if !otelx.Off(nil) {
			b.Fatal("a global provider is set")
		}
	}
}

// BenchmarkStoreTracerOff: what a store adds to a claim while no provider is set:
// StoreTracer.Claim and EndClaim on the span it returns.
func BenchmarkStoreTracerOff(b *testing.B) {
	st := otelx.NewStoreTracer(nil, "memory")
	ctx := context.Background()
	k := idem.Key{Scope: "bench", ID: "k"}
	b.ReportAllocs()
	for b.Loop() {
		_, span := st.Claim(ctx, k, false)
		otelx.EndClaim(span, idem.Result{}, nil)
	}
}
