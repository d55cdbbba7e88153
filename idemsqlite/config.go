package idemsqlite

import (
	"fmt"
	"time"

	"github.com/idemhq/idem"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"
)

// Defaults applied to a zero Config.
const (
	DefaultBusyTimeout = 10 * time.Second
	DefaultMaxBatch    = 256
	DefaultSweepBatch  = 10_000
)

// Synchronous is the durability of a commit: SQLite's PRAGMA synchronous in WAL mode.
type Synchronous uint8

const (
	// SyncFull (the default) fsyncs the write-ahead log at every commit: a claim or
	// completion that returned survives a power loss.
	SyncFull Synchronous = iota
	// SyncNormal skips the fsync at commit and syncs only at checkpoints. The database
	// stays consistent, but the last commits before a power loss (not a process crash)
	// can be lost: a completed key may be forgotten and its effect run again. Use it
	// only when the effect is itself idempotent or a rerun is acceptable.
	SyncNormal
)

func (s Synchronous) pragma() string {
	if s == SyncNormal {
		return "NORMAL"
	}
	return "FULL"
}

// Config configures a Store. The zero value is ready to use: durable commits, a 10 s
// busy timeout, group commits of up to 256 calls, sweeps of 10,000 rows.
type Config struct {
	// Synchronous is the commit durability. The zero value is SyncFull.
	Synchronous Synchronous
	// BusyTimeout is how long a write waits for another writer of the same file (a
	// business transaction, another process) before failing with a retryable
	// *idem.BackendError. Zero means DefaultBusyTimeout.
	BusyTimeout time.Duration
	// MaxBatch is the most calls the group-commit writer applies in one transaction.
	// Larger batches amortise the fsync over more calls but make each caller wait for
	// the whole batch. Zero means DefaultMaxBatch.
	MaxBatch int
	// SweepBatch is the most expired rows one sweep transaction deletes; Sweep runs
	// batches until none is left, so claims are never blocked behind one huge delete.
	// Zero means DefaultSweepBatch.
	SweepBatch int
	// Now is the clock that drives leases, retention and tokens. Nil means time.Now.
	Now func() time.Time
	// Registerer, if set, receives the store's Prometheus metrics.
	Registerer prometheus.Registerer
	// TracerProvider receives a span per claim, completion and release (see the
	// package documentation). Nil means the global provider; while that is unset,
	// or with a no-op provider, no span is started.
	TracerProvider trace.TracerProvider
	// SkipMigrate leaves the schema alone, for deployments that apply `idem migrate
	// print` with their own tool: Open and New then only check that the schema is up
	// to date, and fail with a *migrate.BehindError naming the missing migration.
	SkipMigrate bool
}

// withDefaults validates c and fills in its zero fields: the one place both are done.
func (c Config) withDefaults() (Config, error) {
	switch {
	case c.Synchronous > SyncNormal:
		return c, &idem.InputError{Field: "Config.Synchronous", Reason: fmt.Sprintf("is unknown (%d)", c.Synchronous),
			Fix: "use idemsqlite.SyncFull (the default) or idemsqlite.SyncNormal"}
	case c.BusyTimeout < 0:
		return c, &idem.InputError{Field: "Config.BusyTimeout", Reason: fmt.Sprintf("is negative (%s)", c.BusyTimeout),
			Fix: "use a positive duration, or zero for the default " + DefaultBusyTimeout.String()}
	case c.MaxBatch < 0:
		return c, &idem.InputError{Field: "Config.MaxBatch", Reason: fmt.Sprintf("is negative (%d)", c.MaxBatch),
			Fix: fmt.Sprintf("use a positive number, or zero for the default %d", DefaultMaxBatch)}
	case c.SweepBatch < 0:
		return c, &idem.InputError{Field: "Config.SweepBatch", Reason: fmt.Sprintf("is negative (%d)", c.SweepBatch),
			Fix: fmt.Sprintf("use a positive number, or zero for the default %d", DefaultSweepBatch)}
	}
	if c.BusyTimeout == 0 {
		c.BusyTimeout = DefaultBusyTimeout
	}
	if c.MaxBatch == 0 {
		c.MaxBatch = DefaultMaxBatch
	}
	if c.SweepBatch == 0 {
		c.SweepBatch = DefaultSweepBatch
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c, nil
}
