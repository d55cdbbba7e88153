package idempg

import (
	"fmt"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/migrate"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"
)

// Defaults applied to a zero Config.
const (
	DefaultTable      = "idem_records"
	DefaultSweepBatch = 10_000
)

// Config configures a Store or SQLStore. The zero value is ready to use.
type Config struct {
	// Table is the records table, created by New unless SkipMigrate is set. It must be
	// a lowercase identifier (a-z, 0-9, _) of at most 48 bytes; the connection's
	// search_path chooses the schema. Its token sequence is Table+"_token_seq" and its
	// sweeper index Table+"_expires_at_idx". Empty means DefaultTable.
	Table string
	// Registerer, if set, receives the store's Prometheus metrics: idem_claims_total,
	// idem_duplicates_total, idem_claim_duration_seconds, idem_swept_total and
	// idem_records (the planner's estimate, refreshed by autovacuum).
	Registerer prometheus.Registerer
	// TracerProvider receives a span per claim, completion and release (see the
	// package documentation). Nil means the global provider; while that is unset,
	// or with a no-op provider, no span is started.
	TracerProvider trace.TracerProvider
	// SweepBatch is how many expired rows one Sweep statement deletes; Sweep repeats
	// until a statement deletes fewer. Smaller batches hold locks and bloat WAL
	// bursts for less time. Zero means DefaultSweepBatch; negative is invalid.
	SweepBatch int
	// SkipMigrate leaves the schema alone, for deployments that apply `idem migrate
	// print` with their own tool or run with a role that may not run DDL: New then
	// only checks that the table is up to date, and fails with a *migrate.BehindError
	// naming the missing migration (a table under another name is its own line of
	// versions: `idem migrate print --table name`).
	SkipMigrate bool

	offline bool // tests only: no schema check either (export_test.go)
}

// withDefaults returns cfg with zero fields replaced by the defaults, validated.
func (cfg Config) withDefaults() (Config, error) {
	if cfg.Table == "" {
		cfg.Table = DefaultTable
	}
	if cfg.SweepBatch == 0 {
		cfg.SweepBatch = DefaultSweepBatch
	}
	// The name rules are the migrations' (package migrate), which create the table.
	if err := migrate.CheckName(idemsql.Postgres, migrate.Records(cfg.Table), "idempg.Config.Table"); err != nil {
		return cfg, err
	}
	if cfg.SweepBatch < 0 {
		return cfg, &idem.InputError{Field: "idempg.Config.SweepBatch",
			Reason: fmt.Sprintf("is negative (%d)", cfg.SweepBatch),
			Fix:    fmt.Sprintf("use a positive row count, or zero for the default %d", DefaultSweepBatch)}
	}
	return cfg, nil
}
