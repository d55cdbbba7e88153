package idempg_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idempg"
	"github.com/idemhq/idem/internal/testsvc"
	"github.com/jackc/pgx/v5/pgxpool"
)

func migrationsApplied(t *testing.T, pool *pgxpool.Pool, table string) int {
	t.Helper()
	var n int
	err := pool.QueryRow(ctxFor(t), "SELECT count(*) FROM idem_migrations WHERE component = $1", table).Scan(&n)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func TestMigrateIsIdempotent(t *testing.T) {
	t.Parallel()
	s, pool := newStore(t, idempg.Config{})
	ctx := ctxFor(t)
	k := idem.Key{Scope: "s", ID: "kept"}
	res, err := s.Claim(ctx, idem.Claim{Key: k})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Complete(ctx, k, res.Token, []byte("r")); err != nil {
		t.Fatal(err)
	}
	want := migrationsApplied(t, pool, idempg.DefaultTable)
	again, err := idempg.New(ctx, pool, idempg.Config{})
	if err != nil {
		t.Fatalf("second New: %v", err)
	}
	if got := migrationsApplied(t, pool, idempg.DefaultTable); got != want || got == 0 {
		t.Fatalf("migrations recorded = %d after a second New, want %d (>0)", got, want)
	}
	// The second store sees the first one's data: nothing was recreated.
	if rep, err := again.Claim(ctx, idem.Claim{Key: k}); err != nil || rep.Outcome != idem.Replayed {
		t.Fatalf("claim through the second store = %v, %v; want Replayed", rep.Outcome, err)
	}
}

// Eight processes start at once on an empty schema: all succeed, the table is
// created once, and tokens come from one sequence.
func TestConcurrentNew(t *testing.T) {
	t.Parallel()
	cs, _ := testsvc.PostgresSchema(t)
	ctx := ctxFor(t)
	const procs = 8
	stores := make([]*idempg.Store, procs)
	errs := make([]error, procs)
	var start, done sync.WaitGroup
	start.Add(1)
	for i := range procs {
		pool, err := pgxpool.New(ctx, cs)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pool.Close)
		done.Add(1)
		go func() {
			defer done.Done()
			start.Wait()
			stores[i], errs[i] = idempg.New(ctx, pool, idempg.Config{})
		}()
	}
	start.Done()
	done.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("New in process %d: %v", i, err)
		}
	}
	k := idem.Key{Scope: "s", ID: "k"}
	var last uint64
	for i, s := range stores {
		res, err := s.Claim(ctx, idem.Claim{Key: idem.Key{Scope: "s", ID: string(rune('a' + i))}})
		if err != nil || res.Outcome != idem.Acquired || res.Token <= last {
			t.Fatalf("process %d: claim = %v token %d, %v; want Acquired above %d", i, res.Outcome, res.Token, err, last)
		}
		last = res.Token
	}
	if res, err := stores[0].Claim(ctx, idem.Claim{Key: k}); err != nil || res.Outcome != idem.Acquired {
		t.Fatalf("claim = %v, %v", res.Outcome, err)
	}
	if res, err := stores[7].Claim(ctx, idem.Claim{Key: k}); err != nil || res.Outcome != idem.InProgress {
		t.Fatalf("claim through another process = %v, %v; want InProgress", res.Outcome, err)
	}
}

// Two tables in one schema are two key spaces with their own migrations.
func TestTablesAreSeparate(t *testing.T) {
	t.Parallel()
	a, pool := newStore(t, idempg.Config{Table: "idem_a"})
	b, err := idempg.New(ctxFor(t), pool, idempg.Config{Table: "idem_b"})
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxFor(t)
	c := idem.Claim{Key: idem.Key{Scope: "s", ID: "k"}}
	for name, s := range map[string]idem.Store{"idem_a": a, "idem_b": b} {
		if res, err := s.Claim(ctx, c); err != nil || res.Outcome != idem.Acquired {
			t.Fatalf("%s: claim = %v, %v; want Acquired", name, res.Outcome, err)
		}
		if n := migrationsApplied(t, pool, name); n == 0 {
			t.Fatalf("%s: no migrations recorded", name)
		}
	}
}

func TestNewUnreachableIsBackendError(t *testing.T) {
	t.Parallel()
	ctx := ctxFor(t)
	_, err := idempg.New(ctx, unreachablePool(t), idempg.Config{})
	var be *idem.BackendError
	if !errors.As(err, &be) || be.Op != "migrate" || be.Backend != "postgres" {
		t.Fatalf("New on an unreachable server = %v, want a postgres migrate *idem.BackendError", err)
	}
	_, err = idempg.NewSQL(ctx, unreachableDB(t), idempg.Config{})
	if !errors.As(err, &be) || be.Op != "migrate" {
		t.Fatalf("NewSQL on an unreachable server = %v, want a migrate *idem.BackendError", err)
	}
}

func TestNewCancelledContext(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := idempg.New(ctx, unreachablePool(t), idempg.Config{}); !errors.Is(err, context.Canceled) {
		t.Fatalf("New with a cancelled context = %v, want context.Canceled", err)
	}
}
