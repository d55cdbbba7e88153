package testsvc

import (
	"context"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
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
