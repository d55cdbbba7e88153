package idemredis_test

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemredis"
)

// BenchmarkCluster compares, in one run on the test Redis Cluster (three masters,
// one replica each), an idem claim of a fresh key with the raw SET NX PX of a value
// as large as a claim record, at 16 clients: over all three shards, with WAIT for
// one replica, and on one shard alone (keys whose slot the first master serves),
// whose figure is the claims/s one shard gives here.
func BenchmarkCluster(b *testing.B) {
	cb := clusterSetup(b)
	cb.client = cb.cluster.Client(b, &redis.ClusterOptions{PoolSize: 32, MinIdleConns: 16})
	ctx := context.Background()
	async := cb.store(b, idemredis.Config{})
	waited := cb.store(b, idemredis.Config{WaitReplicas: 1})
	first, err := cb.client.MasterForKey(ctx, async.Key(idem.Key{Scope: "bench", ID: "k0"}))
	if err != nil {
		b.Fatal(err)
	}
	var seq atomic.Int64
	// next returns a fresh id, on the first master's shard when oneShard is set.
	next := func(oneShard bool) string {
		for {
			id := "k" + strconv.FormatInt(seq.Add(1), 36)
			if !oneShard {
				return id
			}
			if m, err := cb.client.MasterForKey(ctx, async.Key(idem.Key{Scope: "bench", ID: id})); err == nil && m == first {
				return id
			}
		}
	}
	claim := func(s *idemredis.Store, oneShard bool) func() error {
		return func() error {
			res, err := s.Claim(ctx, idem.Claim{Key: idem.Key{Scope: "bench", ID: next(oneShard)}})
			if err == nil && res.Outcome != idem.Acquired {
				err = fmt.Errorf("fresh key: outcome %v", res.Outcome)
			}
			return err
		}
	}
	val := make([]byte, 34)
	setNX := func(oneShard bool) func() error {
		return func() error {
			ok, err := cb.client.SetNX(ctx, async.Key(idem.Key{Scope: "bench", ID: next(oneShard)}), val, idem.DefaultLease).Result()
			if err == nil && !ok {
				err = fmt.Errorf("fresh key was set")
			}
			return err
		}
	}
	for _, c := range []struct {
		name string
		op   func() error
	}{
		{"claim", claim(async, false)},
		{"setnx", setNX(false)},
		{"claim-wait1", claim(waited, false)},
		{"claim-one-shard", claim(async, true)},
		{"setnx-one-shard", setNX(true)},
	} {
		b.Run(c.name, func(b *testing.B) {
			const clients = 16
			b.SetParallelism(max(1, (clients+runtime.GOMAXPROCS(0)-1)/runtime.GOMAXPROCS(0)))
			b.ResetTimer()
			start := time.Now()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if err := c.op(); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "claims/s")
		})
	}
}
