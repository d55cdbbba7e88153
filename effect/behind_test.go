package effect_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemhq/idem/effect"
	"github.com/idemhq/idem/idemkey"
	"github.com/idemhq/idem/idempg"
	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/idemtest"
	"github.com/idemhq/idem/internal/testsvc"
)

// writeBehind returns a Fence with KeyedWriteBehind whose writer is held until
// the returned release; the test's cleanup releases it and waits for its writes.
func writeBehind(t *testing.T, e env, cfg effect.Config) (*effect.Fence[*sql.Tx], func()) {
	t.Helper()
	cfg.KeyedWriteBehind = true
	f := e.fence(t, cfg)
	release := effect.HoldWriteBehind(f)
	t.Cleanup(func() {
		release()
		if err := f.Flush(context.Background()); err != nil {
			t.Errorf("Flush: %v", err)
		}
	})
	return f, release
}

// With write-behind, DoKeyed answers before its record is written; until then
// the Fence answers the effect from memory (a result, or a permanent failure)
// without calling again, and Flush writes the records, which other fences then
// answer from.
func TestWriteBehindAnswersBeforeTheRecord(t *testing.T) {
	t.Parallel()
	forEachDB(t, func(t *testing.T, e env) {
		ctx := context.Background()
		f, release := writeBehind(t, e, effect.Config{})
		var calls atomic.Int64
		call := func(context.Context, string) ([]byte, error) {
			return fmt.Appendf(nil, "ch_%d", calls.Add(1)), nil
		}
		declined := func(context.Context, string) ([]byte, error) {
			calls.Add(1)
			return nil, effect.Permanent(errors.New("card declined"))
		}
		for range 2 {
			got, err := f.DoKeyed(ctx, "order-1", "charge", call)
			if err != nil || string(got) != "ch_1" {
				t.Fatalf("DoKeyed = %q, %v; want ch_1", got, err)
			}
			got[0] = 'X' // the caller's to change: not the Fence's copy
			var fe *effect.FailedError
			if _, err := f.DoKeyed(ctx, "order-2", "charge", declined); !errors.As(err, &fe) || fe.Reason != "permanent: card declined" {
				t.Fatalf("declined: %v, want a FailedError", err)
			}
		}
		if n := calls.Load(); n != 2 {
			t.Errorf("%d calls for two effects done twice each, want 2", n)
		}
		if _, ok, err := f.Get(ctx, "order-1", "charge"); ok || err != nil {
			t.Fatalf("recorded %v, %v while the writer is held; want no row yet", ok, err)
		}

		release()
		if err := f.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		if fx, ok, err := f.Get(ctx, "order-1", "charge"); err != nil || !ok || fx.State != effect.StateComplete || string(fx.Result) != "ch_1" {
			t.Errorf("order-1 after Flush: %+v, %v, %v; want complete with ch_1", fx, ok, err)
		}
		if fx, ok, err := f.Get(ctx, "order-2", "charge"); err != nil || !ok || fx.State != effect.StateFailed || fx.Reason != "permanent: card declined" {
			t.Errorf("order-2 after Flush: %+v, %v, %v; want failed with its reason", fx, ok, err)
		}
		other := e.fence(t, effect.Config{})
		if got, err := other.DoKeyed(ctx, "order-1", "charge", call); err != nil || string(got) != "ch_1" || calls.Load() != 2 {
			t.Errorf("another fence: %q, %v, %d calls; want the record ch_1 and no call", got, err, calls.Load())
		}
	})
}

// A crash before the writer wrote a record loses it; the retry, in another
// process, derives the same key and the downstream, which deduplicates by it,
// answers with the first charge. The lost writer's late record then finds the
// row and changes nothing.
func TestWriteBehindCrashChargesOnce(t *testing.T) {
	t.Parallel()
	forEachDB(t, func(t *testing.T, e env) {
		ctx := context.Background()
		p := newPayments(t, true)
		crashed, _ := writeBehind(t, e, effect.Config{}) // never released before the retry: the crash
		first, err := crashed.DoKeyed(ctx, "order-1", "charge", p.charge("order-1"))
		if err != nil {
			t.Fatal(err)
		}
		retry := e.fence(t, effect.Config{KeyedWriteBehind: true})
		got, err := retry.DoKeyed(ctx, "order-1", "charge", p.charge("order-1"))
		if err != nil {
			t.Fatal(err)
		}
		if err := retry.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		p.wantCharged(t, "order-1", 1)
		if id, ok := p.happened(idemkey.Derive("order-1", "charge")); !ok || string(got) != string(first) || string(got) != `{"id":"`+id+`"}`+"\n" {
			t.Errorf("the retry got %q, the first %q; want both the first charge %q", got, first, id)
		}
		if fx, ok, err := retry.Get(ctx, "order-1", "charge"); err != nil || !ok || string(fx.Result) != string(first) {
			t.Errorf("recorded %+v, %v, %v; want the first charge", fx, ok, err)
		}
	})
}

// A Fence holds at most its bound of unwritten records: a DoKeyed that finds it
// reached records its own outcome and waits for the commit, as without
// write-behind.
func TestWriteBehindIsBounded(t *testing.T) {
	t.Parallel()
	forEachDB(t, func(t *testing.T, e env) {
		ctx := context.Background()
		f, release := writeBehind(t, e, effect.Config{})
		effect.SetWriteBehind(f, 2, effect.DeferredAttempts, 0)
		call := func(_ context.Context, key string) ([]byte, error) { return []byte(key), nil }
		for i := range 3 {
			if _, err := f.DoKeyed(ctx, fmt.Sprint("order-", i), "charge", call); err != nil {
				t.Fatal(err)
			}
		}
		for i, want := range []bool{false, false, true} {
			if _, ok, err := f.Get(ctx, fmt.Sprint("order-", i), "charge"); ok != want || err != nil {
				t.Errorf("order-%d recorded %v, %v with the writer held; want %v", i, ok, err, want)
			}
		}
		release()
		if err := f.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		for i := range 3 {
			if _, ok, err := f.Get(ctx, fmt.Sprint("order-", i), "charge"); !ok || err != nil {
				t.Errorf("order-%d after Flush: recorded %v, %v", i, ok, err)
			}
		}
	})
}

// A record the database refuses stalls nothing: the records written with it are
// written alone, and after DeferredAttempts it is given up, logged and counted
// (outcome unrecorded); the next DoKeyed of that effect calls again.
func TestWriteBehindGivesUpARefusedRecord(t *testing.T) {
	t.Parallel()
	forEachDB(t, func(t *testing.T, e env) {
		ctx := context.Background()
		reg := prometheus.NewRegistry()
		f, release := writeBehind(t, e, effect.Config{Registerer: reg})
		effect.SetWriteBehind(f, effect.MaxDeferredRecords, 3, 0)
		refuse := `ALTER TABLE idem_effects ADD CONSTRAINT no_poison CHECK (result IS NULL OR result <> 'poison')`
		if e.name == "sqlite" { // no constraints added to a table
			refuse = `CREATE TRIGGER no_poison BEFORE INSERT ON idem_effects WHEN NEW.result = CAST('poison' AS BLOB)
				BEGIN SELECT RAISE(ABORT, 'poison'); END`
		}
		if err := e.db.Auto(ctx, func(q idemsql.Querier) error {
			_, err := q.Exec(ctx, refuse)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		var calls atomic.Int64
		call := func(_ context.Context, key string) ([]byte, error) {
			calls.Add(1)
			if key == idemkey.Derive("order-0", "charge") {
				return []byte("poison"), nil
			}
			return []byte("ok"), nil
		}
		for i := range 3 {
			if _, err := f.DoKeyed(ctx, fmt.Sprint("order-", i), "charge", call); err != nil {
				t.Fatal(err)
			}
		}
		if n := deferred(t, reg); n != 3 {
			t.Errorf("idem_effects_deferred = %v with the writer held, want 3", n)
		}
		release()
		if err := f.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		for i, want := range []bool{false, true, true} {
			if _, ok, err := f.Get(ctx, fmt.Sprint("order-", i), "charge"); ok != want || err != nil {
				t.Errorf("order-%d recorded %v, %v; want %v", i, ok, err, want)
			}
		}
		if n := outcomes(t, reg, "unrecorded"); n != 1 {
			t.Errorf("idem_effects_total{outcome=\"unrecorded\"} = %v, want 1", n)
		}
		if n := deferred(t, reg); n != 0 {
			t.Errorf("idem_effects_deferred = %v once the records are written or given up, want 0", n)
		}
		if _, err := f.DoKeyed(ctx, "order-0", "charge", call); err != nil || calls.Load() != 4 {
			t.Errorf("the given-up effect again: %v, %d calls; want a fourth call", err, calls.Load())
		}
	})
}

// Callers racing on the same keys, half of them on another Fence, are each
// answered with the one charge the downstream made for their key.
func TestWriteBehindConcurrentCallers(t *testing.T) {
	t.Parallel()
	forEachDB(t, func(t *testing.T, e env) {
		ctx := context.Background()
		p := newPayments(t, true)
		fences := []*effect.Fence[*sql.Tx]{
			e.fence(t, effect.Config{KeyedWriteBehind: true}), e.fence(t, effect.Config{KeyedWriteBehind: true}),
		}
		const keys, callers = 20, 6
		answers := make([][]string, keys)
		var mu sync.Mutex
		var wg sync.WaitGroup
		for c := range callers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range keys {
					k := (i + c*7) % keys
					order := fmt.Sprint("order-", k)
					// Two fences are two processes: the downstream answers the
					// second of two concurrent calls 409, for the caller to retry.
					got, err := fences[c%2].DoKeyed(ctx, order, "charge", p.charge(order))
					for n := 0; err != nil && strings.Contains(err.Error(), "409") && n < 10000; n++ {
						got, err = fences[c%2].DoKeyed(ctx, order, "charge", p.charge(order))
					}
					if err != nil {
						t.Error(err)
						return
					}
					mu.Lock()
					answers[k] = append(answers[k], string(got))
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		for _, f := range fences {
			if err := f.Flush(ctx); err != nil {
				t.Fatal(err)
			}
		}
		for k, got := range answers {
			order := fmt.Sprint("order-", k)
			p.wantCharged(t, order, 1)
			fx, ok, err := fences[0].Get(ctx, order, "charge")
			if err != nil || !ok {
				t.Fatalf("%s not recorded: %v", order, err)
			}
			for _, a := range got {
				if a != string(fx.Result) {
					t.Errorf("%s: a caller got %q, the record holds %q", order, a, fx.Result)
				}
			}
		}
	})
}

// outcomes is idem_effects_total{outcome} in reg, summed over steps.
func outcomes(t *testing.T, reg *prometheus.Registry, outcome string) float64 {
	t.Helper()
	return idemtest.MetricSum(t, reg, "idem_effects_total", map[string]string{"outcome": outcome})
}

// deferred is idem_effects_deferred on reg: the write-behind records not yet written.
func deferred(t *testing.T, reg *prometheus.Registry) float64 {
	t.Helper()
	return idemtest.MetricValue(t, reg, "idem_effects_deferred", nil)
}

// Records that wait through a database outage are kept and written once it is
// reachable again; Flush returns then, and none is given up. On Postgres through
// a proxy that refuses connections until the writer has failed.
func TestWriteBehindThroughAnOutage(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cs, _ := testsvc.PostgresSchema(t)
	proxy, through := testsvc.PostgresProxy(t, cs)
	pool, err := pgxpool.New(ctx, through)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	reg := prometheus.NewRegistry()
	f, err := effect.New(ctx, idempg.TxDB(pool), effect.Config{KeyedWriteBehind: true, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	effect.SetWriteBehind(f, effect.MaxDeferredRecords, 1<<30, time.Millisecond)
	release := effect.HoldWriteBehind(f)
	defer release()
	const n = 50
	for i := range n {
		key := fmt.Sprint("order-", i)
		if _, err := f.DoKeyed(ctx, key, "charge", func(context.Context, string) ([]byte, error) { return []byte(key), nil }); err != nil {
			t.Fatal(err)
		}
	}

	proxy.Down()
	release()
	testsvc.Eventually(t, time.Minute, "the writer failed while the database was down", func() bool {
		return effect.WriteBehindFailures(f) >= 2
	})
	if got := deferred(t, reg); got != n {
		t.Errorf("idem_effects_deferred = %v through the outage, want %d", got, n)
	}
	if err := proxy.Up(); err != nil {
		t.Fatal(err)
	}
	if err := f.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		key := fmt.Sprint("order-", i)
		if fx, ok, err := f.Get(ctx, key, "charge"); err != nil || !ok || string(fx.Result) != key {
			t.Errorf("%s after the outage: %+v, %v, %v; want recorded with its result", key, fx, ok, err)
		}
	}
	if n := outcomes(t, reg, "unrecorded"); n != 0 {
		t.Errorf("%v records given up, want none", n)
	}
	if got := deferred(t, reg); got != 0 {
		t.Errorf("idem_effects_deferred = %v after Flush, want 0", got)
	}
}
