package idemredis_test

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemredis"
	"github.com/idemhq/idem/internal/testsvc"
	"github.com/redis/go-redis/v9"
)

// benchClients are the concurrencies each benchmark runs at: 16 goroutines, about
// as many concurrent callers as a busy service replica has (whatever GOMAXPROCS
// is), and a single caller, whose figure is bound by the round trip rather than by
// Redis's CPU.
var benchClients = []int{16, 1}

// benchSetup returns a store and its client sized for the largest concurrency.
func benchSetup(b *testing.B) bundle {
	b.Helper()
	prefix := testsvc.RedisPrefix(b)
	client := redis.NewClient(&redis.Options{Addr: testsvc.RedisAddr(), PoolSize: 2 * benchClients[0], MinIdleConns: benchClients[0]})
	b.Cleanup(func() {
		deletePrefix(b, client, prefix)
		client.Close()
	})
	s, err := idemredis.New(client, idemredis.Config{Prefix: prefix})
	if err != nil {
		b.Fatal(err)
	}
	return bundle{store: s, client: client, prefix: prefix}
}

// runClients runs body as a sub-benchmark per concurrency of benchClients, with
// keys that are fresh across all of them, and reports claims/s (perOp claims each
// time body runs).
func runClients(b *testing.B, perOp int, body func(ctx context.Context, next func() string) error) {
	ctx := context.Background()
	var seq atomic.Int64
	next := func() string { return "k" + strconv.FormatInt(seq.Add(1), 36) }
	for _, clients := range benchClients {
		b.Run(fmt.Sprintf("clients=%d", clients), func(b *testing.B) {
			b.ReportAllocs()
			start, ops := time.Now(), 0
			if clients == 1 {
				for b.Loop() {
					ops++
					if err := body(ctx, next); err != nil {
						b.Fatal(err)
					}
				}
			} else {
				b.SetParallelism(max(1, (clients+runtime.GOMAXPROCS(0)-1)/runtime.GOMAXPROCS(0)))
				b.ResetTimer()
				start = time.Now()
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						if err := body(ctx, next); err != nil {
							b.Error(err)
							return
						}
					}
				})
				ops = b.N
			}
			b.ReportMetric(float64(ops*perOp)/time.Since(start).Seconds(), "claims/s")
		})
	}
}

// BenchmarkClaim claims fresh keys: the cost of one idem claim (an EVALSHA).
func BenchmarkClaim(b *testing.B) {
	s := benchSetup(b).store
	runClients(b, 1, func(ctx context.Context, next func() string) error {
		res, err := s.Claim(ctx, idem.Claim{Key: idem.Key{Scope: "bench", ID: next()}})
		if err == nil && res.Outcome != idem.Acquired {
			err = fmt.Errorf("fresh key: outcome %v", res.Outcome)
		}
		return err
	})
}

// BenchmarkRawSetNX is the baseline of BenchmarkClaim: a bare SET NX with an expiry
// and a value as large as a claim record, at the same concurrency.
func BenchmarkRawSetNX(b *testing.B) {
	bd := benchSetup(b)
	val := make([]byte, 34) // a claim record without fingerprint
	runClients(b, 1, func(ctx context.Context, next func() string) error {
		ok, err := bd.client.SetNX(ctx, bd.prefix+next(), val, idem.DefaultLease).Result()
		if err == nil && !ok {
			err = fmt.Errorf("fresh key was set")
		}
		return err
	})
}

// BenchmarkClaimBatch claims 100 fresh keys per ClaimBatch call; claims/s compares
// with BenchmarkClaim's.
func BenchmarkClaimBatch(b *testing.B) {
	const size = 100
	s := benchSetup(b).store
	runClients(b, size, func(ctx context.Context, next func() string) error {
		claims := make([]idem.Claim, size)
		for i := range claims {
			claims[i] = idem.Claim{Key: idem.Key{Scope: "bench", ID: next()}}
		}
		res, err := s.ClaimBatch(ctx, claims)
		if err == nil && res[size-1].Outcome != idem.Acquired {
			err = fmt.Errorf("fresh key: outcome %v", res[size-1].Outcome)
		}
		return err
	})
}

// BenchmarkClaimComplete is the whole life of an effect's record: claim, then
// complete with a small result.
func BenchmarkClaimComplete(b *testing.B) {
	s := benchSetup(b).store
	result := []byte(`{"id":"ch_123","status":"succeeded"}`)
	runClients(b, 1, func(ctx context.Context, next func() string) error {
		k := idem.Key{Scope: "bench", ID: next()}
		res, err := s.Claim(ctx, idem.Claim{Key: k})
		if err != nil {
			return err
		}
		return s.Complete(ctx, k, res.Token, result)
	})
}
