package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/cmd/idem/internal/cli"
)

// benchRow is one measured figure beside its baseline from the same run.
type benchRow struct {
	Store        string  `json:"store"`
	Operation    string  `json:"operation"`
	OpsPerSec    float64 `json:"ops_per_sec"`
	Baseline     string  `json:"baseline,omitempty"`
	BaselineOps  float64 `json:"baseline_ops_per_sec,omitempty"`
	Ratio        float64 `json:"ratio,omitempty"`
	Concurrency  int     `json:"concurrency"`
	DurationSecs float64 `json:"duration_seconds"`
}

// benchOptions are the knobs shared by every backend's bench.
type benchOptions struct {
	duration    time.Duration
	concurrency int
	batch       int
	postgres    string
	redis       string
}

// benchTarget measures one backend: its rows, each with a baseline where one exists.
type benchTarget struct {
	name string
	run  func(ctx context.Context, o benchOptions) ([]benchRow, error)
}

func (m *Main) runBench(ctx context.Context, args []string) error {
	fs := m.newFlagSet("bench", `Measures idem's stores end to end from parallel clients and prints each figure
beside its raw baseline measured in the same run at the same concurrency:
Redis claims beside raw SET NX PX, PostgreSQL and SQLite claims beside a raw
INSERT … ON CONFLICT DO NOTHING, memory claims beside a sharded map insert.`)
	stores := fs.String("stores", "memory,sqlite,postgres,redis", "comma-separated backends to measure")
	o := benchOptions{}
	fs.DurationVar(&o.duration, "duration", 3*time.Second, "how long each figure is measured")
	fs.IntVar(&o.concurrency, "concurrency", 16, "parallel clients")
	fs.IntVar(&o.batch, "batch", 100, "claims per batch for the batched figures")
	fs.StringVar(&o.postgres, "postgres", cli.EnvOr("IDEM_TEST_POSTGRES_URL", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"), "PostgreSQL URL [$IDEM_TEST_POSTGRES_URL]")
	fs.StringVar(&o.redis, "redis", cli.EnvOr("IDEM_TEST_REDIS_ADDR", "127.0.0.1:6379"), "Redis address [$IDEM_TEST_REDIS_ADDR]")
	asJSON := fs.Bool("json", false, "write JSON instead of a table")
	if err := cli.Parse(fs, args); err != nil {
		return err
	}
	if o.concurrency <= 0 || o.duration <= 0 || o.batch <= 0 {
		return cli.UsageErr(fs, "--concurrency, --duration and --batch must be positive")
	}
	targets := map[string]benchTarget{
		"memory":   {"memory", benchMemory},
		"sqlite":   {"sqlite", benchSQLite},
		"postgres": {"postgres", benchPostgres},
		"redis":    {"redis", benchRedis},
	}
	var rows []benchRow
	for _, name := range strings.Split(*stores, ",") {
		t, ok := targets[strings.TrimSpace(name)]
		if !ok {
			return cli.UsageErr(fs, "--stores: unknown backend %q (memory, sqlite, postgres, redis)", name)
		}
		fmt.Fprintf(m.Stderr, "idem bench: measuring %s…\n", t.name)
		got, err := t.run(ctx, o)
		if err != nil {
			return fmt.Errorf("idem bench %s: %w", t.name, err)
		}
		rows = append(rows, got...)
	}
	if *asJSON {
		enc := json.NewEncoder(m.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rows)
	}
	tw := tabwriter.NewWriter(m.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "store\toperation\tops/s\tbaseline\tbaseline ops/s\tratio\n")
	for _, r := range rows {
		base, ratio := "-", "-"
		if r.Baseline != "" {
			base = fmt.Sprintf("%.0f", r.BaselineOps)
			ratio = fmt.Sprintf("%.2f×", r.Ratio)
		}
		fmt.Fprintf(tw, "%s\t%s\t%.0f\t%s\t%s\t%s\n", r.Store, r.Operation, r.OpsPerSec, orDash(r.Baseline), base, ratio)
	}
	fmt.Fprintf(tw, "\n(%d clients, %s per figure)\n", o.concurrency, o.duration)
	return tw.Flush()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// measure runs op from o.concurrency goroutines for o.duration and returns ops/s.
// op's n is a process-unique counter, so every call can use a fresh key.
func measure(ctx context.Context, o benchOptions, opsPerCall int, op func(ctx context.Context, n uint64) error) (float64, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var counter, done atomic.Uint64
	var wg sync.WaitGroup
	var once sync.Once
	var failure error
	stop := time.Now().Add(o.duration)
	start := time.Now()
	for range o.concurrency {
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
func versus(store, op string, ops float64, baseline string, baseOps float64, o benchOptions) benchRow {
	r := benchRow{Store: store, Operation: op, OpsPerSec: ops, Concurrency: o.concurrency, DurationSecs: o.duration.Seconds()}
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
