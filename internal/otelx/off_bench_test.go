package otelx_test

import (
	"testing"

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
