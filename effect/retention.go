package effect

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/internal/retention"
	"github.com/idemhq/idem/migrate"
)

const (
	// DefaultRetention is how long a Sweeper keeps a complete effect after its
	// last change when SweepConfig.Retention is zero.
	DefaultRetention = 7 * 24 * time.Hour
	// MinRetention is the shortest retention a Sweeper or Admin.Purge accepts: a
	// complete effect must outlive every retry of its Do, or the retry calls again.
	MinRetention = time.Minute
	// DefaultSweepBatch is how many effects one sweep statement deletes when
	// SweepConfig.Batch is zero.
	DefaultSweepBatch = 1000
	// MaxSweepBatch bounds SweepConfig.Batch: one statement holds its rows' locks
	// until it commits.
	MaxSweepBatch = 100_000
)

// SweepConfig configures a Sweeper. The zero value is usable.
type SweepConfig struct {
	// Retention is how long a complete effect is kept after its last change; a
	// Do of its key and step after that calls again. Keep it above the longest
	// time a caller retries one effect (a broker's redelivery horizon, a saga's
	// lease and backoff). Zero means DefaultRetention; below MinRetention is
	// invalid.
	Retention time.Duration
	// Batch is how many effects one statement deletes; Sweep repeats it until a
	// statement finds fewer. Zero means DefaultSweepBatch.
	Batch int
	// Now is the clock the retention is measured on. Nil means time.Now.
	Now func() time.Time
	// Registerer receives idem_swept_total{backend="effect"} and
	// idem_sweep_last_success_timestamp_seconds{backend="effect"}.
	Registerer prometheus.Registerer
}

// limits are the effects table's retention defaults and bounds.
var limits = retention.Limits{Default: DefaultRetention, Min: MinRetention, DefaultBatch: DefaultSweepBatch,
	Batch: MaxSweepBatch, Rows: "effects", Backend: "effect",
	Fix: "keep complete effects longer than any retry of their Do, such as 168h (7 days)"}

// Sweeper deletes complete effects older than its retention: run it with
// storekit.RunSweeper in one or more processes (concurrent sweeps skip each other's
// rows). It never deletes a pending effect (in progress, or waiting for Recover), a
// failed one (an operator's to look at: Admin lists them), nor any effect of a saga
// that has not finished; the saga Sweeper deletes those with their saga.
type Sweeper[Tx any] struct{ s *retention.Sweeper }

var _ idem.Sweeper = (*Sweeper[*struct{}])(nil)

// NewSweeper returns a Sweeper of db's idem_effects. Like NewAdmin it changes no
// schema: it fails with a *migrate.BehindError if idem_effects lacks a migration.
func NewSweeper[Tx any](ctx context.Context, db idemsql.TxDB[Tx], cfg SweepConfig) (*Sweeper[Tx], error) {
	s, err := limits.Sweeper(retention.Config(cfg), func() (retention.PurgeFunc, error) {
		a, err := NewAdmin(ctx, db)
		if err != nil {
			return nil, err
		}
		return a.purge, nil
	})
	if err != nil {
		return nil, err
	}
	return &Sweeper[Tx]{s}, nil
}

// Sweep implements idem.Sweeper: it deletes the complete effects whose last change
// is older than the retention, Batch per statement, and returns how many.
func (s *Sweeper[Tx]) Sweep(ctx context.Context) (int, error) { return s.s.Sweep(ctx) }

// Purge deletes the complete effects whose last change is older than olderThan
// (at least MinRetention), as a Sweeper with that retention does, and returns how
// many it deleted: what an operator runs to shrink the table at once.
func (a *Admin[Tx]) Purge(ctx context.Context, olderThan time.Duration) (int, error) {
	return limits.PurgeOlder(ctx, a.now(), olderThan, a.purge)
}

// purge deletes complete effects last changed before cutoff, batch per statement
// (EffectSQL.Sweep, in a transaction of its own), until a statement deletes fewer.
func (a *Admin[Tx]) purge(ctx context.Context, cutoff time.Time, batch int) (int, error) {
	sagas, err := a.sagasTable(ctx)
	if err != nil {
		return 0, err
	}
	stmt := a.q.Sweep
	if sagas {
		stmt = a.q.SweepKeepingSagas
	}
	return limits.Batches(ctx, batch, func() (int, error) {
		var n int64
		err := a.db.Auto(ctx, func(q idemsql.Querier) (err error) {
			n, err = q.Exec(ctx, stmt, cutoff.UnixNano(), batch)
			return err
		})
		return int(n), err
	})
}

// sagasTable reports whether idem_sagas exists (its migrations were applied), so
// the sweep can keep the effects of unfinished sagas.
func (a *Admin[Tx]) sagasTable(ctx context.Context) (bool, error) {
	states, err := migrate.Status(ctx, a.db, migrate.Saga)
	if err != nil {
		return false, err
	}
	return len(states) == 1 && states[0].Applied > 0, nil
}
