package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/idemhq/idem/cmd/idem/internal/bench"
	"github.com/idemhq/idem/cmd/idem/internal/cli"
)

// benchTarget measures one backend: its rows, each with a baseline where one exists.
type benchTarget struct {
	name string
	run  func(ctx context.Context, o bench.Options) ([]bench.Row, error)
}

func (m *Main) runBench(ctx context.Context, args []string) error {
	fs := m.newFlagSet("bench", `Measures idem's stores end to end from parallel clients and prints each figure
beside its raw baseline measured in the same run at the same concurrency:
Redis claims beside raw SET NX PX, PostgreSQL and SQLite claims beside a raw
INSERT … ON CONFLICT DO NOTHING, memory claims beside a sharded map insert.`)
	stores := fs.String("stores", "memory,sqlite,postgres,redis", "comma-separated backends to measure")
	o := bench.Options{}
	fs.DurationVar(&o.Duration, "duration", 3*time.Second, "how long each figure is measured")
	fs.IntVar(&o.Concurrency, "concurrency", 16, "parallel clients")
	fs.IntVar(&o.Batch, "batch", 100, "claims per batch for the batched figures")
	fs.StringVar(&o.Postgres, "postgres", cli.EnvOr("IDEM_TEST_POSTGRES_URL", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"), "PostgreSQL URL [$IDEM_TEST_POSTGRES_URL]")
	fs.StringVar(&o.Redis, "redis", cli.EnvOr("IDEM_TEST_REDIS_ADDR", "127.0.0.1:6379"), "Redis address [$IDEM_TEST_REDIS_ADDR]")
	asJSON := fs.Bool("json", false, "write JSON instead of a table")
	if err := cli.Parse(fs, args); err != nil {
		return err
	}
	if o.Concurrency <= 0 || o.Duration <= 0 || o.Batch <= 0 {
		return cli.UsageErr(fs, "--concurrency, --duration and --batch must be positive")
	}
	targets := map[string]benchTarget{
		"memory":   {"memory", bench.Memory},
		"sqlite":   {"sqlite", bench.SQLite},
		"postgres": {"postgres", bench.Postgres},
		"redis":    {"redis", bench.Redis},
	}
	var rows []bench.Row
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
	fmt.Fprintf(tw, "\n(%d clients, %s per figure)\n", o.Concurrency, o.Duration)
	return tw.Flush()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
