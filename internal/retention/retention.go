// Package retention is what the sweepers of idem's tables with a retention
// (effect.Sweeper, saga.Sweeper) share: their settings' defaults and checks, the
// sweep itself, an operator's purge, and the loop of bounded batches either runs.
// A table's package keeps only its statements: how one batch is deleted.
package retention

import (
	"context"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/internal/metrics"
)

// Limits are one table's defaults and bounds.
type Limits struct {
	Default, Min        time.Duration // the retention when none is set; the shortest accepted
	DefaultBatch, Batch int           // the batch when none is set; the largest accepted
	Rows                string        // what a batch holds: "effects", "sagas"
	Fix                 string        // how to choose a retention, for the error below Min
	Backend             string        // the backend of errors and metrics: "effect", "saga"
}

// Config is a table's SweepConfig (effect.SweepConfig, saga.SweepConfig convert
// to it): the retention, the batch, the clock and where the metrics go.
type Config struct {
	Retention  time.Duration
	Batch      int
	Now        func() time.Time
	Registerer prometheus.Registerer
}

// PurgeFunc deletes a table's finished rows last changed before cutoff, batch at
// a time, and returns how many it deleted.
type PurgeFunc func(ctx context.Context, cutoff time.Time, batch int) (int, error)

// Sweeper is New with cfg, whose Purge is what admin returns (the table's
// operator view): a table's NewSweeper.
func (l Limits) Sweeper(cfg Config, admin func() (PurgeFunc, error)) (*Sweeper, error) {
	s, err := New(l, cfg.Retention, cfg.Batch, cfg.Now, cfg.Registerer, l.Backend)
	if err != nil {
		return nil, err
	}
	if s.Purge, err = admin(); err != nil {
		return nil, err
	}
	return s, nil
}

// PurgeOlder deletes at once, DefaultBatch at a time, the rows purge deletes that
// are older than olderThan at now, which must be at least Min: an Admin's Purge.
func (l Limits) PurgeOlder(ctx context.Context, now time.Time, olderThan time.Duration, purge PurgeFunc) (int, error) {
	if err := l.Check("olderThan", olderThan); err != nil {
		return 0, err
	}
	return purge(ctx, now.Add(-olderThan), l.DefaultBatch)
}

// Batches runs batch after batch of del (one transaction each, run again on a
// serialization failure) as the package function Batches does, and reports a
// failure as an *idem.BackendError of l's backend, op "sweep".
func (l Limits) Batches(ctx context.Context, batch int, del func() (int, error)) (int, error) {
	return Batches(ctx, batch, func() (n int, err error) {
		err = idemsql.RetrySerializationFailures(ctx, func() (err error) {
			n, err = del()
			return err
		})
		if err != nil {
			return 0, &idem.BackendError{Backend: l.Backend, Op: "sweep", Err: err}
		}
		return n, nil
	})
}

// Sweeper deletes a table's finished rows whose last change is older than
// Retention, calling Purge with the cutoff, and records each sweep in Metrics.
type Sweeper struct {
	Retention time.Duration
	Batch     int
	Now       func() time.Time
	Purge     PurgeFunc
	Metrics   *metrics.Sweep
}

// New returns a Sweeper with l's defaults applied to retention, batch and now,
// recording its sweeps under backend on reg (if not nil), or an *idem.InputError
// naming the field (SweepConfig.Retention, .Batch) out of l's bounds. The caller
// sets its Purge.
func New(l Limits, retention time.Duration, batch int, now func() time.Time, reg prometheus.Registerer, backend string) (*Sweeper, error) {
	if retention == 0 {
		retention = l.Default
	}
	if batch == 0 {
		batch = l.DefaultBatch
	}
	if now == nil {
		now = time.Now
	}
	if err := l.Check("SweepConfig.Retention", retention); err != nil {
		return nil, err
	}
	if batch < 0 || batch > l.Batch {
		return nil, &idem.InputError{Field: "SweepConfig.Batch", Reason: fmt.Sprintf("is %d", batch),
			Fix: fmt.Sprintf("use 1 to %d %s, or 0 for %d", l.Batch, l.Rows, l.DefaultBatch)}
	}
	m, err := metrics.NewSweep(reg, backend)
	if err != nil {
		return nil, err
	}
	return &Sweeper{Retention: retention, Batch: batch, Now: now, Metrics: m}, nil
}

// Check refuses a retention (or an age to purge) shorter than l.Min.
func (l Limits) Check(field string, d time.Duration) error {
	if d < l.Min {
		return &idem.InputError{Field: field, Reason: fmt.Sprintf("is %v, below the minimum %v", d, l.Min), Fix: l.Fix}
	}
	return nil
}

// Sweep deletes the rows older than the retention and returns how many.
func (s *Sweeper) Sweep(ctx context.Context) (int, error) {
	n, err := s.Purge(ctx, s.Now().Add(-s.Retention), s.Batch)
	s.Metrics.Done(n, err)
	return n, err
}

// Batches runs one batch after another, each in its own transaction, until one
// deletes fewer than batch rows or ctx ends, and returns how many they deleted.
func Batches(ctx context.Context, batch int, run func() (int, error)) (int, error) {
	total := 0
	for {
		if err := ctx.Err(); err != nil {
			return total, err
		}
		n, err := run()
		total += n
		if err != nil || n < batch {
			return total, err
		}
	}
}
