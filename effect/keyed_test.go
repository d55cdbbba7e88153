package effect_test

import (
	"context"
	"database/sql"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemhq/idem/effect"
	"github.com/idemhq/idem/idemkey"
	"github.com/idemhq/idem/internal/sqltest"
)

// crashKeyed runs DoKeyed with a call that makes the charge and then dies (panics)
// before DoKeyed records it: the fault point between the downstream and the record.
func crashKeyed(t *testing.T, f *effect.Fence[*sql.Tx], key string, call effect.Call) {
	t.Helper()
	defer func() {
		if r := recover(); r != "crash" {
			t.Fatalf("the worker did not crash: %v", r)
		}
	}()
	_, _ = f.DoKeyed(context.Background(), key, "charge", func(ctx context.Context, k string) ([]byte, error) {
		if _, err := call(ctx, k); err != nil {
			t.Errorf("call before the crash: %v", err)
		}
		panic("crash")
	})
}

// A crash between the downstream call and the record leaves no row; the retry
// derives the same key, and the downstream, which deduplicates by it, answers with
// the first charge instead of charging again.
func TestKeyedCrashChargesOnce(t *testing.T) {
	t.Parallel()
	forEachDB(t, func(t *testing.T, e env) {
		ctx := context.Background()
		p := newPayments(t, true)
		f := e.fence(t, effect.Config{})
		crashKeyed(t, f, "order-1", p.charge("order-1"))
		if _, ok, err := f.Get(ctx, "order-1", "charge"); ok || err != nil {
			t.Fatalf("after the crash: recorded %v, %v; want no row (no PENDING on the keyed path)", ok, err)
		}
		got, err := f.DoKeyed(ctx, "order-1", "charge", p.charge("order-1"))
		if err != nil {
			t.Fatal(err)
		}
		p.wantCharged(t, "order-1", 1)
		if id, ok := p.happened(idemkey.Derive("order-1", "charge")); !ok || string(got) != `{"id":"`+id+`"}`+"\n" {
			t.Errorf("the retry got %q, want the first charge %q", got, id)
		}
		if fx, ok, err := f.Get(ctx, "order-1", "charge"); err != nil || !ok || fx.State != effect.StateComplete || string(fx.Result) != string(got) {
			t.Errorf("recorded %+v, %v, %v; want complete with %q", fx, ok, err, got)
		}
	})
}

// A recorded result, or a recorded permanent failure, is answered without a call;
// in a transaction, it is recorded only if the transaction commits.
func TestKeyedReplaysTheRecord(t *testing.T) {
	t.Parallel()
	forEachDB(t, func(t *testing.T, e env) {
		ctx := context.Background()
		f := e.fence(t, effect.Config{})
		var calls atomic.Int64
		call := func(context.Context, string) ([]byte, error) {
			return []byte("ch_" + string(rune('0'+calls.Add(1)))), nil
		}
		declined := func(context.Context, string) ([]byte, error) {
			calls.Add(1)
			return nil, effect.Permanent(errors.New("card declined"))
		}
		for range 2 {
			if got, err := f.DoKeyed(ctx, "order-1", "charge", call); err != nil || string(got) != "ch_1" {
				t.Fatalf("DoKeyed = %q, %v; want ch_1", got, err)
			}
			var fe *effect.FailedError
			if _, err := f.DoKeyed(ctx, "order-2", "charge", declined); !errors.As(err, &fe) || fe.Reason != "permanent: card declined" {
				t.Fatalf("declined: %v, want a FailedError", err)
			}
		}
		if n := calls.Load(); n != 2 {
			t.Errorf("%d calls for two effects done twice each, want 2", n)
		}

		// DoKeyedTx: a rollback records nothing, a commit records with the tx.
		for _, commit := range []bool{false, true} {
			tx, err := e.db.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := f.DoKeyedTx(ctx, tx, "order-3", "charge", call); err != nil {
				t.Fatal(err)
			}
			if commit {
				err = e.db.Commit(ctx, tx)
			} else {
				err = e.db.Rollback(ctx, tx)
			}
			if err != nil {
				t.Fatal(err)
			}
			if _, ok, err := f.Get(ctx, "order-3", "charge"); ok != commit || err != nil {
				t.Fatalf("commit %v: recorded %v, %v", commit, ok, err)
			}
		}
		got, err := f.DoKeyed(ctx, "order-3", "charge", call)
		if err != nil || string(got) != "ch_4" || calls.Load() != 4 {
			t.Fatalf("after the commit: %q, %v, %d calls; want the committed ch_4 and no new call", got, err, calls.Load())
		}
	})
}

// Concurrent callers of one Fence on one key share one call: the downstream is
// called once, and every caller gets its answer.
func TestKeyedConcurrentCallersCallOnce(t *testing.T) {
	t.Parallel()
	forEachDB(t, func(t *testing.T, e env) {
		const callers = 8
		ctx := context.Background()
		p := newPayments(t, true)
		f := e.fence(t, effect.Config{})
		var calls atomic.Int64
		charge := p.charge("order-1")
		call := func(ctx context.Context, key string) ([]byte, error) {
			// Hold the call until every other caller waits on it, or (sharing
			// broken) has entered a call of its own.
			n := calls.Add(1)
			waitFor(t, func() bool {
				return effect.KeyedWaiting(f, "order-1", "charge") == callers-1 || calls.Load() == callers
			})
			if n > 1 {
				return nil, errors.New("a second call")
			}
			return charge(ctx, key)
		}
		results := make([]string, callers)
		var wg sync.WaitGroup
		for i := range callers {
			wg.Go(func() {
				got, err := f.DoKeyed(ctx, "order-1", "charge", call)
				if err != nil {
					t.Errorf("caller %d: %v", i, err)
				}
				results[i] = string(got)
			})
		}
		wg.Wait()
		if n := calls.Load(); n != 1 {
			t.Errorf("%d calls for %d concurrent callers of one effect, want 1", n, callers)
		}
		for i, r := range results {
			if r != results[0] || r == "" {
				t.Errorf("caller %d got %q, caller 0 %q", i, r, results[0])
			}
		}
		p.wantCharged(t, "order-1", 1)
	})
}

// A downstream that does not deduplicate by the key is what the two-write fence is
// for: a crash between the call and the record charges twice on the keyed path,
// while the fence's PENDING row turns the retry away during the lease and, with
// Reconcile, finds the first charge after it.
func TestKeyedNeedsADownstreamThatDedups(t *testing.T) {
	t.Parallel()
	forEachDB(t, func(t *testing.T, e env) {
		ctx := context.Background()
		p := newPayments(t, false)
		f := e.fence(t, effect.Config{Lease: time.Minute, Reconcile: func(_ context.Context, step, key string) ([]byte, bool, error) {
			id, ok := p.happened(key)
			return []byte(`{"id":"` + id + `"}`), ok, nil
		}})
		crashKeyed(t, f, "keyed", p.charge("keyed"))
		if _, err := f.DoKeyed(ctx, "keyed", "charge", p.charge("keyed")); err != nil {
			t.Fatal(err)
		}
		p.wantCharged(t, "keyed", 2) // the documented double effect

		crash(t, f, "fenced", "charge", p.charge("fenced"), true)
		if _, err := f.DoKeyed(ctx, "fenced", "charge", p.charge("fenced")); !errors.Is(err, effect.ErrInProgress) {
			t.Fatalf("DoKeyed of an effect the fence holds: %v, want ErrInProgress", err)
		}
		e.clock.Jump(2 * time.Minute)
		if _, err := f.Do(ctx, "fenced", "charge", p.charge("fenced")); err != nil {
			t.Fatal(err)
		}
		p.wantCharged(t, "fenced", 1)
	})
}

// waitFor waits until cond holds, checking as the other goroutines make progress;
// it fails t if that takes longer than a bound no healthy run comes near.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Error("waited a minute for the other callers")
			return
		}
	}
}

// On Postgres, DoKeyed callers share their reads and records (GroupLook and
// GroupRecord over arrays): a batch records only the effects that have no row, a
// key twice in it once, and reads each caller's own effect.
func TestKeyedGroupAnswers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f, err := effect.New(ctx, sqltest.Postgres(t), effect.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.DoKeyed(ctx, "k1", "charge", func(context.Context, string) ([]byte, error) { return []byte("r1"), nil }); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Do(ctx, "k5", "charge", func(context.Context, string) ([]byte, error) { return []byte("r5"), nil }); err != nil {
		t.Fatal(err)
	}
	got := effect.RecordAsBatch(f, ctx, []string{"k3", "k1", "k2", "k2", "k2"}, []string{"charge", "charge", "charge", "charge", "ship"},
		[][]byte{[]byte("r3"), []byte("x"), []byte("r2"), []byte("y"), []byte("s2")})
	if want := []bool{true, false, true, false, true}; !slices.Equal(got, want) {
		t.Errorf("recorded %v, want %v", got, want)
	}
	states, results := effect.LookAsBatch(f, ctx, []string{"k2", "k1", "k4", "k5", "k2", "k3"}, []string{"charge", "charge", "charge", "charge", "ship", "charge"})
	var read []string
	for i := range states {
		read = append(read, states[i]+":"+string(results[i]))
	}
	if want := []string{"complete:r2", "complete:r1", ":", "complete:r5", "complete:s2", "complete:r3"}; !slices.Equal(read, want) {
		t.Errorf("read %v, want %v", read, want)
	}
}
