package idemhttp_test

import (
	"context"
	"runtime"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// benchTracerProvider is the OpenTelemetry SDK sampling every request, with a batch
// span processor whose exporter discards the spans: the cost of tracing in the
// process, without a collector's.
func benchTracerProvider(b *testing.B) *sdktrace.TracerProvider {
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()), sdktrace.WithBatcher(tracetest.NewNoopExporter()))
	b.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return tp
}

// BenchmarkMiddlewareTraced is BenchmarkMiddleware/new-key with the SDK at 100%
// sampling: compare it with that figure from the same run.
func BenchmarkMiddlewareTraced(b *testing.B) {
	t := newMWBenchTarget(b, "new-key-traced")
	procs := runtime.GOMAXPROCS(0)
	b.SetParallelism(max(1, (mwBenchClients+procs-1)/procs))
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		key := []byte("replayed-key")
		for pb.Next() {
			t.send(b, key)
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "req/s")
}
