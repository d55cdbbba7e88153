package effect_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/effect"
	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/migrate"
)

// The sweeper deletes complete effects older than the retention, and only those:
// pending effects (in progress, or waiting for Recover) and failed ones (an
// operator's) stay whatever their age, as do the complete effects of a saga that
// has not finished; a swept effect is called again by the next Do.
func TestSweepDeletesOnlyFinishedEffects(t *testing.T) {
	t.Parallel()
	forEachDB(t, func(t *testing.T, e env) {
		ctx := context.Background()
		f := e.fence(t, effect.Config{Lease: time.Minute})
		calls := 0
		ok := func(context.Context, string) ([]byte, error) { calls++; return []byte(fmt.Sprint("r", calls)), nil }
		for _, k := range []string{"done-1", "done-2", "done-3", "saga-failed", "saga-done"} {
			step := "charge"
			if k[:4] == "saga" {
				step = "do:reserve" // a saga's step, under the saga's id
			}
			if _, err := f.Do(ctx, k, step, ok); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := f.Do(ctx, "declined", "charge", func(context.Context, string) ([]byte, error) {
			return nil, effect.Permanent(errors.New("card declined"))
		}); !errors.As(err, new(*effect.FailedError)) {
			t.Fatalf("permanent failure: %v", err)
		}
		crash(t, f, "crashed", "charge", ok, true) // pending, its lease will pass
		if _, err := f.Do(ctx, "timeout", "charge", func(context.Context, string) ([]byte, error) {
			return nil, errors.New("timeout")
		}); err == nil {
			t.Fatal("the failing call succeeded")
		}
		// The sagas whose effects those are: one waits for an operator, one is done.
		if err := migrate.Up(ctx, e.db, migrate.Saga); err != nil {
			t.Fatal(err)
		}
		for id, state := range map[string]string{"saga-failed": "failed", "saga-done": "completed"} {
			err := e.db.InTx(ctx, func(tx *sql.Tx) error {
				_, err := e.db.Querier(tx).Exec(ctx, `INSERT INTO idem_sagas (id, saga, state, step, data, results, attempts, reason,
					next_at, lease_until, token, created_at, updated_at) VALUES ($1, 'order', $2, 0, '', '{}', 0, '', 0, 0, 1, 0, 0)`, id, state)
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
		}

		e.clock.Jump(2 * time.Hour) // everything above is older than the retention
		if _, err := f.Do(ctx, "recent", "charge", ok); err != nil {
			t.Fatal(err)
		}
		reg := prometheus.NewRegistry()
		s, err := effect.NewSweeper(ctx, e.db, effect.SweepConfig{Retention: time.Hour, Batch: 2, Now: e.clock.Now, Registerer: reg})
		if err != nil {
			t.Fatal(err)
		}
		n, err := s.Sweep(ctx)
		if err != nil || n != 4 {
			t.Fatalf("Sweep = %d, %v; want the 4 old complete effects outside unfinished sagas", n, err)
		}
		want := `
# HELP idem_swept_total Expired records removed by sweeps.
# TYPE idem_swept_total counter
idem_swept_total{backend="effect"} 4
`
		if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "idem_swept_total"); err != nil {
			t.Error(err)
		}
		if n, err := testutil.GatherAndCount(reg, "idem_sweep_last_success_timestamp_seconds"); n != 1 || err != nil {
			t.Errorf("idem_sweep_last_success_timestamp_seconds: %d series, %v; want 1", n, err)
		}
		a, err := effect.NewAdmin(ctx, e.db)
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range []struct{ key, step, state string }{
			{"done-1", "charge", ""}, {"done-2", "charge", ""}, {"done-3", "charge", ""}, {"saga-done", "do:reserve", ""},
			{"saga-failed", "do:reserve", effect.StateComplete}, {"declined", "charge", effect.StateFailed},
			{"crashed", "charge", effect.StatePending}, {"timeout", "charge", effect.StatePending},
			{"recent", "charge", effect.StateComplete},
		} {
			got, err := a.Get(ctx, k.key, k.step)
			switch {
			case k.state == "" && !errors.Is(err, idem.ErrNotFound):
				t.Errorf("%s/%s after the sweep: %+v, %v; want it deleted", k.key, k.step, got, err)
			case k.state != "" && (err != nil || got.State != k.state):
				t.Errorf("%s/%s after the sweep: %+v, %v; want it kept, %s", k.key, k.step, got, err, k.state)
			}
		}
		if n, err := s.Sweep(ctx); err != nil || n != 0 {
			t.Fatalf("second Sweep = %d, %v; want nothing left to delete", n, err)
		}
		// A swept effect is forgotten: its next Do calls again.
		before := calls
		if _, err := f.Do(ctx, "done-1", "charge", ok); err != nil || calls != before+1 {
			t.Fatalf("Do of a swept effect: %v, %d calls; want it called again", err, calls-before)
		}
	})
}

// An operator's Purge deletes what a sweep with that retention would, and refuses
// an age below MinRetention, which would forget effects still being retried.
func TestAdminPurge(t *testing.T) {
	t.Parallel()
	forEachDB(t, func(t *testing.T, e env) {
		ctx := context.Background()
		f := e.fence(t, effect.Config{})
		ok := func(context.Context, string) ([]byte, error) { return []byte("ok"), nil }
		for i := range 3 {
			if _, err := f.Do(ctx, fmt.Sprint("k", i), "charge", ok); err != nil {
				t.Fatal(err)
			}
		}
		a, err := effect.NewAdmin(ctx, e.db)
		if err != nil {
			t.Fatal(err)
		}
		var ie *idem.InputError
		if _, err := a.Purge(ctx, time.Second); !errors.As(err, &ie) || ie.Field != "olderThan" {
			t.Fatalf("Purge of effects older than 1s: %v, want an *idem.InputError on olderThan", err)
		}
		if n, err := a.Purge(ctx, time.Hour); err != nil || n != 0 {
			t.Fatalf("Purge of effects older than an hour = %d, %v; want 0 (they are new)", n, err)
		}
		for _, cfg := range []effect.SweepConfig{{Retention: time.Second}, {Batch: -1}, {Batch: effect.MaxSweepBatch + 1}} {
			if _, err := effect.NewSweeper(ctx, e.db, cfg); !errors.As(err, &ie) {
				t.Errorf("NewSweeper(%+v) = %v, want an *idem.InputError", cfg, err)
			}
		}
	})
}

// A Do of an effect that a sweep deletes at the worst moment, between the insert
// that found it and the read under its lock, replays or calls again and never
// fails: the test's querier deletes the row there, once, in the Do's transaction.
func TestSweepRacingDo(t *testing.T) {
	t.Parallel()
	forEachDB(t, func(t *testing.T, e env) {
		ctx := context.Background()
		ok := func(context.Context, string) ([]byte, error) { return []byte("ok"), nil }
		if _, err := e.fence(t, effect.Config{}).Do(ctx, "k", "charge", ok); err != nil {
			t.Fatal(err)
		}
		racing := e
		swept := &sweepingQuerier{}
		racing.db.Querier = func(tx *sql.Tx) idemsql.Querier { swept.q = e.db.Querier(tx); return swept }
		if _, err := racing.fence(t, effect.Config{}).Do(ctx, "k", "charge", ok); err != nil {
			t.Fatalf("Do of an effect swept between its insert and its read: %v", err)
		}
		if e.db.Dialect() != idemsql.MySQL && !swept.fired {
			t.Fatal("the row was not deleted between the insert and the read: the test tests nothing")
		}
	})
}

// sweepingQuerier deletes the effect an INSERT found (0 rows affected), once, as
// a sweep committing at that moment would.
type sweepingQuerier struct {
	q     idemsql.Querier
	fired bool
}

func (s *sweepingQuerier) QueryRow(ctx context.Context, q string, args ...any) idemsql.Row {
	return s.q.QueryRow(ctx, q, args...)
}

func (s *sweepingQuerier) Query(ctx context.Context, q string, args ...any) (idemsql.Rows, error) {
	return s.q.Query(ctx, q, args...)
}

func (s *sweepingQuerier) Exec(ctx context.Context, q string, args ...any) (int64, error) {
	n, err := s.q.Exec(ctx, q, args...)
	if err == nil && n == 0 && !s.fired && strings.Contains(q, "INTO idem_effects") {
		s.fired = true
		_, err = s.q.Exec(ctx, "DELETE FROM idem_effects WHERE state = 'complete'")
	}
	return n, err
}
