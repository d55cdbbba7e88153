package testsvc

import (
	"context"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// RunClients runs op from clients goroutines (however many cores there are) until
// the benchmark's b.N calls are done, each call with a fresh id ("k1", "k2", …), and
// fails b on the first error. Stores and their raw baselines use it alike, so their
// figures compare at the same concurrency.
func RunClients(b *testing.B, clients int, op func(ctx context.Context, id string) error) {
	b.Helper()
	ctx := context.Background()
	var seq atomic.Uint64
	b.SetParallelism(max(1, clients/runtime.GOMAXPROCS(0)))
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := op(ctx, "k"+strconv.FormatUint(seq.Add(1), 10)); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// SDKTracing returns an OpenTelemetry SDK provider that samples every span and
// drops it after a batch span processor, as a traced production service would run
// but with no exporter cost: the benchmarks' "with the SDK at 100%" figures. It is
// shut down when b ends.
func SDKTracing(b testing.TB) trace.TracerProvider {
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()), sdktrace.WithBatcher(tracetest.NewNoopExporter()))
	b.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return tp
}
