package idemmem_test

import (
	"context"
	"hash/maphash"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/google/uuid"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemmem"
)

// uuidKeys returns n distinct 36-character UUID strings.
func uuidKeys(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = uuid.NewString()
	}
	return keys
}

// freshKey returns a distinct 36-character UUID-shaped key for n: prefix (20
// characters of a random UUID) and n in 16 hex digits, so every call of a benchmark
// uses a key no earlier call used, however large b.N grows.
func freshKey(prefix string, n uint64) string {
	const digits = "0123456789abcdef"
	var b [36]byte
	copy(b[:], prefix[:20])
	for i := 35; i >= 20; i-- {
		b[i] = digits[n&15]
		n >>= 4
	}
	return string(b[:])
}

// BenchmarkClaimComplete measures claim+complete pairs on fresh UUID-shaped keys from
// parallel clients: the full life of a dedup record. Every iteration is a new key, so
// every iteration is a pair (no duplicate is ever claimed).
func BenchmarkClaimComplete(b *testing.B) { benchClaimComplete(b, idemmem.Config{}) }

// BenchmarkClaimCompleteTraced is BenchmarkClaimComplete with the OTel SDK sampling
// every span (two spans a pair, to a processor that drops them): the cost of tracing
// beside the untraced figure.
func BenchmarkClaimCompleteTraced(b *testing.B) {
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()))
	b.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	benchClaimComplete(b, idemmem.Config{TracerProvider: tp})
}

func benchClaimComplete(b *testing.B, cfg idemmem.Config) {
	// Every pair leaves a record for its retention: tens of millions of them at a
	// few seconds of -benchtime, past the default budget (the store refuses claims
	// then, as it should).
	cfg.MaxBytes = 8 << 30
	s := newStore(b, cfg)
	prefix := uuid.NewString()
	var next atomic.Uint64
	ctx := context.Background()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			k := idem.Key{Scope: "bench", ID: freshKey(prefix, next.Add(1))}
			res, err := s.Claim(ctx, idem.Claim{Key: k})
			if err != nil || res.Outcome != idem.Acquired {
				b.Fatal(res.Outcome, err)
			}
			if err := s.Complete(ctx, k, res.Token, nil); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "pairs/s")
}

// BenchmarkBaselineShardedMap is the floor a store cannot beat: insert-if-absent of
// the key text into 64 mutex-guarded maps, with no lease, token, expiry or result, on
// the same fresh keys.
func BenchmarkBaselineShardedMap(b *testing.B) {
	type shard struct {
		mu sync.Mutex
		m  map[string]struct{}
		_  [40]byte
	}
	shards := make([]shard, 64)
	for i := range shards {
		shards[i].m = make(map[string]struct{})
	}
	seed := maphash.MakeSeed()
	prefix := uuid.NewString()
	var next atomic.Uint64
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			k := "bench\x00" + freshKey(prefix, next.Add(1))
			sh := &shards[maphash.String(seed, k)&63]
			sh.mu.Lock()
			if _, ok := sh.m[k]; !ok {
				sh.m[k] = struct{}{}
			}
			sh.mu.Unlock()
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
}

// BenchmarkClaimDuplicate measures the hot duplicate path: claims of completed keys.
func BenchmarkClaimDuplicate(b *testing.B) {
	s := newStore(b, idemmem.Config{})
	ctx := context.Background()
	keys := uuidKeys(1 << 16)
	for _, id := range keys {
		k := idem.Key{Scope: "bench", ID: id}
		res, _ := s.Claim(ctx, idem.Claim{Key: k})
		_ = s.Complete(ctx, k, res.Token, nil)
	}
	var next atomic.Uint64
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			res, err := s.Claim(ctx, idem.Claim{Key: idem.Key{Scope: "bench", ID: keys[next.Add(1)&(1<<16-1)]}})
			if err != nil || res.Outcome != idem.Replayed {
				b.Fatal(res.Outcome, err)
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "claims/s")
}

// BenchmarkBytesPerKey remembers one million completed dedup-only UUID keys and
// reports the heap they take, per key (run with -benchtime=1x).
func BenchmarkBytesPerKey(b *testing.B) {
	const n = 1_000_000
	keys := uuidKeys(n)
	ctx := context.Background()
	for range b.N {
		before := heapAfterGC()
		s := newStore(b, idemmem.Config{})
		for _, id := range keys {
			k := idem.Key{Scope: "orders", ID: id}
			res, err := s.Claim(ctx, idem.Claim{Key: k})
			if err != nil {
				b.Fatal(err)
			}
			if err := s.Complete(ctx, k, res.Token, nil); err != nil {
				b.Fatal(err)
			}
		}
		after := heapAfterGC()
		b.ReportMetric(float64(after-before)/n, "B/key")
		runtime.KeepAlive(s)
	}
	runtime.KeepAlive(keys)
}

func heapAfterGC() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}
