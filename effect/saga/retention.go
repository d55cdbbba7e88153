package saga

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/internal/retention"
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

// finished are the states no orchestrator or operator changes again: the only
// sagas a sweep deletes. Running and Compensating ones are in progress; Failed
// ones wait for an operator (Admin.RetryStep or Resolve).
var finished = []string{Completed, Compensated, Resolved}

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
	Batch: MaxSweepBatch, Rows: "sagas", Fix: "keep finished sagas longer than any retry of their Start, such as 720h (30 days)"}

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
	s, err := retention.New(limits, cfg.Retention, cfg.Batch, cfg.Now, cfg.Registerer, "saga")
	if err != nil {
		return nil, err
	}
	a, err := NewAdmin(ctx, db)
	if err != nil {
		return nil, err
	}
	s.Purge = a.purge
	return &Sweeper[Tx]{s}, nil
}

// Sweep implements idem.Sweeper: it deletes the finished sagas whose last change
// is older than the retention, and returns how many.
func (s *Sweeper[Tx]) Sweep(ctx context.Context) (int, error) { return s.s.Sweep(ctx) }

// Purge deletes the finished sagas whose last change is older than olderThan (at
// least MinRetention), as a Sweeper with that retention does, and returns how many
// it deleted.
func (a *Admin[Tx]) Purge(ctx context.Context, olderThan time.Duration) (int, error) {
	if err := limits.Check("olderThan", olderThan); err != nil {
		return 0, err
	}
	return a.purge(ctx, a.now().Add(-olderThan), DefaultSweepBatch)
}

// purge deletes finished sagas last changed before cutoff, batch per
// transaction, until a transaction deletes fewer.
func (a *Admin[Tx]) purge(ctx context.Context, cutoff time.Time, batch int) (int, error) {
	return retention.Batches(ctx, batch, func() (n int, err error) {
		err = idemsql.RetrySerializationFailures(ctx, func() error {
			return a.db.InTx(ctx, func(tx Tx) (err error) {
				n, err = a.purgeBatch(ctx, a.db.Querier(tx), cutoff.UnixNano(), batch)
				return err
			})
		})
		if err != nil {
			return 0, &idem.BackendError{Backend: "saga", Op: "sweep", Err: err}
		}
		return n, nil
	})
}

// purgeBatch deletes up to batch finished sagas last changed before cutoff, with
// their effects and resolutions, and returns how many sagas it deleted.
func (a *Admin[Tx]) purgeBatch(ctx context.Context, q idemsql.Querier, cutoff int64, batch int) (int, error) {
	lock := a.lock
	if a.db.Dialect() == idemsql.Postgres {
		lock += " SKIP LOCKED" // concurrent sweepers share the work
	}
	rows, err := q.Query(ctx, `SELECT id FROM idem_sagas WHERE state IN ('`+strings.Join(finished, "', '")+`')
		AND updated_at < $1 LIMIT $2`+lock, cutoff, batch)
	if err != nil {
		return 0, err
	}
	var ids []any
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return 0, err
		}
		ids = append(ids, id)
	}
	rows.Close()
	if err := rows.Err(); err != nil || len(ids) == 0 {
		return 0, err
	}
	in := placeholders(len(ids))
	for _, stmt := range []string{
		`DELETE FROM idem_effects WHERE ` + a.key + ` IN (` + in + `) AND (step LIKE 'do:%' OR step LIKE 'undo:%')`,
		`DELETE FROM idem_saga_resolutions WHERE id IN (` + in + `)`,
		`DELETE FROM idem_sagas WHERE id IN (` + in + `)`,
	} {
		if _, err := q.Exec(ctx, stmt, ids...); err != nil {
			return 0, err
		}
	}
	return len(ids), nil
}

// placeholders returns "$1, $2, …, $n".
func placeholders(n int) string {
	var b strings.Builder
	for i := 1; i <= n; i++ {
		if i > 1 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "$%d", i)
	}
	return b.String()
}
