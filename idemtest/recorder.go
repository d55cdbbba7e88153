package idemtest

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/idemhq/idem"
)

// recorderOf returns env's store as a TxRecorder (and a Store, for the plain Claim
// the cases also make), or skips the case.
func recorderOf[Tx any](t *testing.T, env TxEnv[Tx]) interface {
	idem.TxRecorder[Tx]
	idem.Store
} {
	t.Helper()
	return optional[interface {
		idem.TxRecorder[Tx]
		idem.Store
	}](t, env.Store)
}

// recordIn runs RecordTx in a transaction of env, committed if commit is set.
func recordIn[Tx any](t *testing.T, env TxEnv[Tx], r idem.TxRecorder[Tx], commit bool, claims ...idem.Claim) []idem.Outcome {
	t.Helper()
	ctx := ctxFor(t)
	tx, err := env.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	out, err := r.RecordTx(ctx, tx, claims)
	if err != nil {
		_ = env.Rollback(ctx, tx)
		t.Fatal(err)
	}
	if !commit {
		if err := env.Rollback(ctx, tx); err != nil {
			t.Fatal(err)
		}
		return out
	}
	if err := env.Commit(ctx, tx); err != nil {
		t.Fatal(err)
	}
	return out
}

// testTxRecord: fresh keys are recorded, a rollback records nothing, repeats within
// a batch follow their first occurrence, recorded keys replay through Claim, and an
// expired record is taken over.
func testTxRecord[Tx any](t *testing.T, env TxEnv[Tx]) {
	r := recorderOf(t, env)
	c := func(id, fp string) idem.Claim {
		return idem.Claim{Key: idem.Key{Scope: "inbox", ID: t.Name() + "/" + id}, Fingerprint: []byte(fp)}
	}
	A, R, M := idem.Acquired, idem.Replayed, idem.Mismatch
	if got := recordIn(t, env, r, false, c("a", "1"), c("b", "1")); !slices.Equal(got, []idem.Outcome{A, A}) {
		t.Fatalf("fresh keys = %v, want acquired", got)
	}
	if got := recordIn(t, env, r, true, c("b", "1"), c("a", "1"), c("a", "1"), c("a", "2")); !slices.Equal(got, []idem.Outcome{A, A, R, M}) {
		t.Fatalf("after a rollback, with repeats = %v, want [A A R M]", got)
	}
	if got := recordIn(t, env, r, true, c("a", "1"), c("b", "2"), c("new", "")); !slices.Equal(got, []idem.Outcome{R, M, A}) {
		t.Fatalf("after a commit = %v, want [replayed mismatch acquired]", got)
	}
	if res, err := r.Claim(ctxFor(t), c("a", "1")); err != nil || res.Outcome != R {
		t.Fatalf("Claim of a recorded key = %v, %v; want replayed", res.Outcome, err)
	}
	exp := c("short", "")
	exp.Retention = time.Millisecond
	recordIn(t, env, r, true, exp)
	deadline := time.Now().Add(expiryDeadline)
	for {
		got := recordIn(t, env, r, true, exp)
		if slices.Equal(got, []idem.Outcome{A}) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("expired record = %v, want acquired", got)
		}
		time.Sleep(time.Millisecond) // the retention must pass on the store's clock
	}
}

// testTxRecordConcurrent: 8 transactions record overlapping batches in different
// orders and commit: each key is Acquired by exactly one, without deadlocks.
func testTxRecordConcurrent[Tx any](t *testing.T, env TxEnv[Tx]) {
	r := recorderOf(t, env)
	const keys = 200
	var mu sync.Mutex
	acquired := map[string]int{}
	raceErrs(t, 8, func(g int) error {
		for start := 0; start < keys; start += 20 {
			var claims []idem.Claim
			for i := start + 19; i >= start; i-- {
				claims = append(claims, idem.Claim{Key: idem.Key{Scope: "c", ID: fmt.Sprintf("%s/%03d", t.Name(), i)}})
			}
			if g%2 == 1 {
				slices.Reverse(claims)
			}
			ctx := ctxFor(t)
			tx, err := env.Begin(ctx)
			if err != nil {
				return err
			}
			out, err := r.RecordTx(ctx, tx, claims)
			if err != nil {
				_ = env.Rollback(ctx, tx)
				return err
			}
			if err := env.Commit(ctx, tx); err != nil {
				return err
			}
			mu.Lock()
			for i, o := range out {
				if o == idem.Acquired {
					acquired[claims[i].Key.ID]++
				}
			}
			mu.Unlock()
		}
		return nil
	})
	if len(acquired) != keys {
		t.Fatalf("%d keys acquired, want %d", len(acquired), keys)
	}
	for k, n := range acquired {
		if n != 1 {
			t.Fatalf("key %s acquired %d times", k, n)
		}
	}
}
