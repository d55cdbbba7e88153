package saga

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/internal/retention"
	"github.com/idemhq/idem/internal/rowscan"
)

const (
	// DefaultRetention is how long a Sweeper keeps a finished saga after its last
	// change when SweepConfig.Retention is zero.
	DefaultRetention = 30 * 24 * time.Hour
	// MinRetention is the shortest retention a Sweeper or Admin.Purge accepts.
	MinRetention = time.Minute
	// DefaultSweepBatch is how many sagas one sweep transaction deletes when
	// SweepConfig.Batch is zero.
	DefaultSweepBatch = 500
	// MaxSweepBatch bounds SweepConfig.Batch: one transaction holds its sagas'
	// locks, and names each of them in its statements.
	MaxSweepBatch = 5000
)

// SweepConfig configures a Sweeper. The zero value is usable.
type SweepConfig struct {
	// Retention is how long a finished saga is kept after its last change. After
	// it, Start or Execute of its id starts a new saga: keep it above the longest
	// time a caller may retry them. Zero means DefaultRetention; below MinRetention
	// is invalid.
	Retention time.Duration
	// Batch is how many sagas one transaction deletes, with their step effects
	// and resolutions; Sweep repeats it until a transaction finds fewer. Zero
	// means DefaultSweepBatch.
	Batch int
	// Now is the clock the retention is measured on. Nil means time.Now.
	Now func() time.Time
	// Registerer receives idem_swept_total{backend="saga"} and
	// idem_sweep_last_success_timestamp_seconds{backend="saga"}.
	Registerer prometheus.Registerer
}

// limits are the sagas table's retention defaults and bounds.
var limits = retention.Limits{Default: DefaultRetention, Min: MinRetention, DefaultBatch: DefaultSweepBatch,
	Batch: MaxSweepBatch, Rows: "sagas", Backend: "saga",
	Fix: "keep finished sagas longer than any retry of their Start, such as 720h (30 days)"}

// Sweeper deletes finished sagas (Completed, Compensated, Resolved) older than its
// retention, each with its step effects (idem_effects rows of key = its id, steps
// do:… and undo:…) and its resolution note, in one transaction: run it with
// storekit.RunSweeper in one or more processes. It never deletes a Running or
// Compensating saga, nor a Failed one (an operator's to retry or resolve), whatever
// its age. effect.Sweeper keeps the effects of those sagas too.
type Sweeper[Tx any] struct{ s *retention.Sweeper }

var _ idem.Sweeper = (*Sweeper[*struct{}])(nil)

// NewSweeper returns a Sweeper of db's sagas. It changes no schema: it fails with
// a *migrate.BehindError if idem_sagas or idem_effects lacks a migration.
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

// Sweep implements idem.Sweeper: it deletes the finished sagas whose last change
// is older than the retention, and returns how many.
func (s *Sweeper[Tx]) Sweep(ctx context.Context) (int, error) { return s.s.Sweep(ctx) }

// Purge deletes the finished sagas whose last change is older than olderThan (at
// least MinRetention), as a Sweeper with that retention does, and returns how many
// it deleted.
func (a *Admin[Tx]) Purge(ctx context.Context, olderThan time.Duration) (int, error) {
	return limits.PurgeOlder(ctx, a.now(), olderThan, a.purge)
}

// purge deletes finished sagas last changed before cutoff, batch per
// transaction, until a transaction deletes fewer.
func (a *Admin[Tx]) purge(ctx context.Context, cutoff time.Time, batch int) (int, error) {
	return limits.Batches(ctx, batch, func() (n int, err error) {
		err = a.db.InTx(ctx, func(tx Tx) (err error) {
			n, err = a.purgeBatch(ctx, a.db.Querier(tx), cutoff.UnixNano(), batch)
			return err
		})
		return n, err
	})
}

// purgeBatch deletes up to batch finished sagas last changed before cutoff
// (SagaSQL.SweepIDs), with their effects and resolutions, and returns how many
// sagas it deleted.
func (a *Admin[Tx]) purgeBatch(ctx context.Context, q idemsql.Querier, cutoff int64, batch int) (int, error) {
	ids, err := rowscan.Strings(ctx, q, a.stmts.SweepIDs, cutoff, batch)
	if err != nil || len(ids) == 0 {
		return 0, err
	}
	args := make([]any, len(ids))
	for i, id := range ids {
		args[i] = id
	}
	for _, stmt := range []func(n int) string{a.stmts.SweepEffects, a.stmts.SweepResolutions, a.stmts.SweepSagas} {
		if _, err := q.Exec(ctx, stmt(len(ids)), args...); err != nil {
			return 0, err
		}
	}
	return len(ids), nil
}
