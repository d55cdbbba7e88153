package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/idemhq/idem/chaos"
)

func (m *Main) runVerify(ctx context.Context, args []string) error {
	fs := m.newFlagSet("verify", `Runs an exactly-once flow under injected faults and checks, from the database
itself, that every effect was applied exactly once and the running balance is
exact. Exits 0 only if nothing was lost and nothing doubled.

Boundary covered today: broker → consumer (messages duplicated, redelivered after
crashes before commit and lost acks, raced by paused consumers; each effect
committed with its key through idem's TxStore). The HTTP, outbox and external
effect boundaries join the table as they are built.

With --unsafe the same flow runs as a plain at-least-once consumer (no idem): it
must report duplicated effects and exit non-zero, which proves the checker can fail.`)
	ops := fs.Int("ops", 10000, "number of messages (effects) to apply")
	workers := fs.Int("workers", 8, "concurrent consumers")
	rate := fs.Float64("fault-rate", 0.25, "probability that a delivery is hit by a fault, 0 to 1")
	seed := fs.Int64("seed", 0, "seed for keys, amounts and faults (0: pick one and print it)")
	db := fs.String("db", envOr("IDEM_DB", "sqlite:"), "database: sqlite:PATH (sqlite: alone = a temporary file) or postgres://…  [$IDEM_DB]")
	unsafe := fs.Bool("unsafe", false, "turn idem off (plain at-least-once): the negative control, expected to fail")
	asJSON := fs.Bool("json", false, "write the report as JSON instead of a table")
	if err := parse(fs, args); err != nil {
		return err
	}
	switch {
	case *ops <= 0:
		return usageErr(fs, "--ops must be positive (got %d)", *ops)
	case *workers <= 0:
		return usageErr(fs, "--workers must be positive (got %d)", *workers)
	case *rate < 0 || *rate > 1:
		return usageErr(fs, "--fault-rate must be between 0 and 1 (got %g)", *rate)
	}
	if *seed == 0 {
		*seed = time.Now().UnixNano()
	}

	env, err := openTxEnv(ctx, *db)
	if err != nil {
		return err
	}
	defer env.close()

	flow := &chaos.ConsumerFlow{
		DB: env.db, Store: env.store, Tables: env.tables,
		Boundary: "broker → consumer", Ops: *ops, Workers: *workers,
		FaultRate: *rate, Seed: *seed, Unsafe: *unsafe,
	}
	start := time.Now()
	row, faults, err := flow.Run(ctx)
	if err != nil {
		return fmt.Errorf("idem verify: %w", err)
	}
	report := &chaos.Report{Seed: *seed, FaultRate: *rate, Ops: *ops, Store: env.name, Unsafe: *unsafe,
		Faults: faults, Rows: []chaos.Row{row}, Elapsed: time.Since(start)}
	if *asJSON {
		err = report.WriteJSON(m.Stdout)
	} else {
		err = report.WriteTable(m.Stdout)
	}
	if err != nil {
		return err
	}
	if !report.OK() {
		return &exitError{"idem verify: effects were lost or doubled"}
	}
	return nil
}

// usageErr reports a bad flag value on the command's output and returns errUsage.
func usageErr(fs *flag.FlagSet, format string, args ...any) error {
	fmt.Fprintf(fs.Output(), fs.Name()+": "+format+"\n", args...)
	return errUsage
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
