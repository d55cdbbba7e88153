package saga

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/effect"
	"github.com/idemhq/idem/idemsql"
)

// retentionSagas makes one saga in each state through the orchestrator and the
// Admin: done (completed), undone (compensated), settled (resolved), broken
// (failed), stuck (running, in an hour's backoff), retrying (compensating).
func retentionSagas(t *testing.T, e adminEnv) {
	t.Helper()
	ctx := context.Background()
	declined, refused := effect.Permanent(errors.New("card declined")), effect.Permanent(errors.New("stock service refused"))
	for _, s := range []struct {
		id   string
		fail map[string]error
		then func(id string) error
		want string
	}{
		{"done", nil, nil, Completed},
		{"undone", map[string]error{"charge": declined}, nil, Compensated},
		{"settled", map[string]error{"charge": declined, "release": refused},
			func(id string) error { return e.admin.Resolve(ctx, id, "released by hand") }, Resolved},
		{"broken", map[string]error{"charge": declined, "release": refused}, nil, Failed},
		{"stuck", map[string]error{"charge": errors.New("timeout")}, nil, Running},
		{"retrying", map[string]error{"charge": declined, "release": refused},
			func(id string) error { return e.admin.RetryStep(ctx, id, "the stock service is fixed") }, Compensating},
	} {
		e.calls.fail = s.fail
		if _, err := e.o.Execute(ctx, "order", s.id, nil); err != nil {
			t.Fatal(err)
		}
		if s.then != nil {
			if err := s.then(s.id); err != nil {
				t.Fatal(err)
			}
		}
		if d, err := e.admin.Get(ctx, s.id); err != nil || d.State != s.want {
			t.Fatalf("saga %s: %+v, %v; want it %s", s.id, d.Instance, err, s.want)
		}
	}
}

// count returns how many rows of table have id (column col) id.
func count(t *testing.T, db idemsql.TxDB[*sql.Tx], table, col, id string) int {
	t.Helper()
	if db.Dialect() == idemsql.MySQL && col == "key" {
		col = "`key`"
	}
	var n int
	err := db.InTx(context.Background(), func(tx *sql.Tx) error {
		return db.Querier(tx).QueryRow(context.Background(), "SELECT COUNT(*) FROM "+table+" WHERE "+col+" = $1", id).Scan(&n)
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// The sweepers delete finished sagas (completed, compensated, resolved) older than
// the retention, with their step effects and resolution, and nothing of a saga in
// progress or waiting for an operator, whatever its age; the effect sweeper keeps
// the complete effects of those sagas too.
func TestSweepDeletesOnlyFinishedSagas(t *testing.T) {
	t.Parallel()
	forEachDB(t, func(t *testing.T, env env) {
		ctx := context.Background()
		e := newAdminEnv(t, env.db)
		retentionSagas(t, e)
		kept := map[string]int{}
		for _, id := range []string{"broken", "stuck", "retrying"} {
			kept[id] = count(t, env.db, "idem_effects", "key", id)
		}
		later := func() time.Time { return time.Now().Add(2 * time.Hour) } // every saga is an hour past the retention

		// The effect sweeper first: it deletes complete effects of finished sagas only.
		es, err := effect.NewSweeper(ctx, env.db, effect.SweepConfig{Retention: time.Hour, Now: later})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := es.Sweep(ctx); err != nil {
			t.Fatal(err)
		}
		// Nothing is older than three hours: a sweep with that retention keeps all.
		s, err := NewSweeper(ctx, env.db, SweepConfig{Retention: 3 * time.Hour, Now: later})
		if err != nil {
			t.Fatal(err)
		}
		if n, err := s.Sweep(ctx); err != nil || n != 0 {
			t.Fatalf("Sweep with a 3h retention = %d, %v; want 0", n, err)
		}
		s, err = NewSweeper(ctx, env.db, SweepConfig{Retention: time.Hour, Batch: 2, Now: later})
		if err != nil {
			t.Fatal(err)
		}
		if n, err := s.Sweep(ctx); err != nil || n != 3 {
			t.Fatalf("Sweep = %d, %v; want the 3 finished sagas", n, err)
		}
		for _, id := range []string{"done", "undone", "settled"} {
			if _, err := e.admin.Get(ctx, id); !errors.Is(err, idem.ErrNotFound) {
				t.Errorf("finished saga %s after the sweep: %v, want it deleted", id, err)
			}
			if n := count(t, env.db, "idem_effects", "key", id); n != 0 {
				t.Errorf("finished saga %s: %d effects left, want none (a failed one included)", id, n)
			}
		}
		if n := count(t, env.db, "idem_saga_resolutions", "id", "settled"); n != 0 {
			t.Errorf("resolved saga's note: %d rows left, want none", n)
		}
		for id, want := range map[string]string{"broken": Failed, "stuck": Running, "retrying": Compensating} {
			d, err := e.admin.Get(ctx, id)
			if err != nil || d.State != want || len(d.Effects) != kept[id] || kept[id] == 0 {
				t.Errorf("saga %s after the sweeps: %v, %d effects, %v; want it %s with its %d effects",
					id, d.State, len(d.Effects), err, want, kept[id])
			}
		}
		// The operator can still act on what was kept.
		if err := e.admin.Resolve(ctx, "broken", "released by hand"); err != nil {
			t.Fatal(err)
		}
	})
}

// An operator's Purge deletes what a sweep with that retention would, and refuses
// an age below MinRetention; bad sweeper settings are refused by name.
func TestAdminPurgeSagas(t *testing.T) {
	t.Parallel()
	forEachDB(t, func(t *testing.T, env env) {
		ctx := context.Background()
		e := newAdminEnv(t, env.db)
		if _, err := e.o.Execute(ctx, "order", "done", nil); err != nil {
			t.Fatal(err)
		}
		var ie *idem.InputError
		if _, err := e.admin.Purge(ctx, time.Second); !errors.As(err, &ie) || ie.Field != "olderThan" {
			t.Fatalf("Purge of sagas older than 1s: %v, want an *idem.InputError on olderThan", err)
		}
		if n, err := e.admin.Purge(ctx, time.Hour); err != nil || n != 0 {
			t.Fatalf("Purge of sagas older than an hour = %d, %v; want 0 (it is new)", n, err)
		}
		e.admin.now = func() time.Time { return time.Now().Add(2 * time.Hour) }
		if n, err := e.admin.Purge(ctx, time.Hour); err != nil || n != 1 {
			t.Fatalf("Purge of sagas older than an hour, two hours on = %d, %v; want 1", n, err)
		}
		for _, cfg := range []SweepConfig{{Retention: time.Second}, {Batch: -1}, {Batch: MaxSweepBatch + 1}} {
			if _, err := NewSweeper(ctx, env.db, cfg); !errors.As(err, &ie) {
				t.Errorf("NewSweeper(%+v) = %v, want an *idem.InputError", cfg, err)
			}
		}
	})
}
