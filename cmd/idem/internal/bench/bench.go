// Package bench measures idem's stores end to end from parallel clients, each
// figure beside its raw baseline measured in the same run at the same
// concurrency (idem bench): Redis claims beside raw SET NX PX, PostgreSQL and
// SQLite claims beside a raw INSERT … ON CONFLICT DO NOTHING, memory claims beside
// a sharded map insert. One function per backend (backends.go) returns its rows.
package bench

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemhq/idem"
)

// Row is one measured figure beside its baseline from the same run.
type Row struct {
	Store        string  `json:"store"`
	Operation    string  `json:"operation"`
	OpsPerSec    float64 `json:"ops_per_sec"`
	Baseline     string  `json:"baseline,omitempty"`
	BaselineOps  float64 `json:"baseline_ops_per_sec,omitempty"`
	Ratio        float64 `json:"ratio,omitempty"`
	Concurrency  int     `json:"concurrency"`
	DurationSecs float64 `json:"duration_seconds"`
}

// Options are the knobs shared by every backend's bench.
type Options struct {
	Duration    time.Duration
	Concurrency int
	Batch       int
	Postgres    string
	Redis       string
}

// measure runs op from o.concurrency goroutines for o.duration and returns ops/s.
// op's n is a process-unique counter, so every call can use a fresh key.
func measure(ctx context.Context, o Options, opsPerCall int, op func(ctx context.Context, n uint64) error) (float64, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var counter, done atomic.Uint64
	var wg sync.WaitGroup
	var once sync.Once
	var failure error
	stop := time.Now().Add(o.Duration)
	start := time.Now()
	for range o.Concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(stop) && ctx.Err() == nil {
				if err := op(ctx, counter.Add(1)); err != nil {
					once.Do(func() { failure = err; cancel() })
					return
				}
				done.Add(uint64(opsPerCall))
			}
		}()
	}
	wg.Wait()
	if failure != nil {
		return 0, failure
	}
	return float64(done.Load()) / time.Since(start).Seconds(), nil
}

// versus builds a row from a figure and its baseline.
func versus(store, op string, ops float64, baseline string, baseOps float64, o Options) Row {
	r := Row{Store: store, Operation: op, OpsPerSec: ops, Concurrency: o.Concurrency, DurationSecs: o.Duration.Seconds()}
	if baseline != "" && baseOps > 0 {
		r.Baseline, r.BaselineOps, r.Ratio = baseline, baseOps, ops/baseOps
	}
	return r
}

// claimOp claims a fresh key per call.
func claimOp(s idem.Store, run string) func(ctx context.Context, n uint64) error {
	return func(ctx context.Context, n uint64) error {
		_, err := s.Claim(ctx, idem.Claim{Key: idem.Key{Scope: "bench", ID: fmt.Sprintf("%s-%d", run, n)}})
		return err
	}
}

// claimCompleteOp claims and completes a fresh key per call: two store operations.
func claimCompleteOp(s idem.Store, run string) func(ctx context.Context, n uint64) error {
	return func(ctx context.Context, n uint64) error {
		k := idem.Key{Scope: "bench", ID: fmt.Sprintf("%s-cc-%d", run, n)}
		res, err := s.Claim(ctx, idem.Claim{Key: k})
		if err != nil {
			return err
		}
		return s.Complete(ctx, k, res.Token, nil)
	}
}

// batchOp claims o.batch fresh keys per call through a BatchClaimer.
func batchOp(s idem.BatchClaimer, run string, size int) func(ctx context.Context, n uint64) error {
	return func(ctx context.Context, n uint64) error {
		claims := make([]idem.Claim, size)
		for i := range claims {
			claims[i] = idem.Claim{Key: idem.Key{Scope: "bench", ID: fmt.Sprintf("%s-b%d-%d", run, n, i)}}
		}
		_, err := s.ClaimBatch(ctx, claims)
		return err
	}
}
