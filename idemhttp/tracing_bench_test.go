package idemhttp_test

import "testing"

// BenchmarkMiddlewareTraced is BenchmarkMiddleware/new-key with the SDK at 100%
// sampling: compare it with that figure from the same run.
func BenchmarkMiddlewareTraced(b *testing.B) { benchMode(b, "new-key-traced") }
