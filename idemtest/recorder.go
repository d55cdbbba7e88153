package idemtest

import (
	"errors"
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

// testTxRecordResults: each recorded key keeps the result given with it, on the
// one-key path, the batch path and an expired key's takeover; a key found recorded
// keeps its first result; a key recorded without one has none; a rollback stores
// nothing; more results than claims is an input error.
func testTxRecordResults[Tx any](t *testing.T, env TxEnv[Tx]) {
	r := optional[interface {
		idem.TxResultRecorder[Tx]
		idem.Store
		idem.Inspector
	}](t, env.Store)
	ctx := ctxFor(t)
	c := func(id string) idem.Claim { return idem.Claim{Key: idem.Key{Scope: "inbox", ID: t.Name() + "/" + id}} }
	record := func(commit bool, claims []idem.Claim, results [][]byte) []idem.Outcome {
		t.Helper()
		tx, err := env.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		out, err := r.RecordResultsTx(ctx, tx, claims, results)
		if err != nil {
			_ = env.Rollback(ctx, tx)
			t.Fatal(err)
		}
		end := env.Rollback
		if commit {
			end = env.Commit
		}
		if err := end(ctx, tx); err != nil {
			t.Fatal(err)
		}
		return out
	}
	wantResult := func(id, want string) { // through a claim's replay, and Inspect
		t.Helper()
		if id != "short" { // its retention is a millisecond: it has expired by now
			res, err := r.Claim(ctx, c(id))
			if err != nil || res.Outcome != idem.Replayed {
				t.Fatalf("Claim(%s) = %v, %v; want replayed", id, res.Outcome, err)
			}
			if string(res.Record.Result) != want {
				t.Fatalf("Claim(%s) replayed result %q, want %q", id, res.Record.Result, want)
			}
		}
		rec, err := r.Inspect(ctx, c(id).Key)
		if err != nil || string(rec.Result) != want {
			t.Fatalf("Inspect(%s) = result %q, %v; want %q", id, rec.Result, err, want)
		}
	}
	A, R := idem.Acquired, idem.Replayed

	record(false, []idem.Claim{c("one")}, [][]byte{[]byte("rolled back")})
	if got := record(true, []idem.Claim{c("one")}, [][]byte{[]byte("r-one")}); !slices.Equal(got, []idem.Outcome{A}) {
		t.Fatalf("one key after a rollback = %v, want acquired", got)
	}
	wantResult("one", "r-one")

	got := record(true, []idem.Claim{c("b"), c("one"), c("a"), c("none")}, [][]byte{[]byte("r-b"), []byte("other"), []byte("r-a")})
	if !slices.Equal(got, []idem.Outcome{A, R, A, A}) {
		t.Fatalf("batch = %v, want [A R A A]", got)
	}
	wantResult("a", "r-a")
	wantResult("b", "r-b")
	wantResult("one", "r-one") // found recorded: keeps its first result
	wantResult("none", "")     // past the end of results: none

	exp := c("short")
	exp.Retention = time.Millisecond
	record(true, []idem.Claim{exp}, [][]byte{[]byte("first")})
	deadline := time.Now().Add(expiryDeadline)
	for i := 0; ; i++ { // with a fresh key beside it: the batch path
		if slices.Equal(record(true, []idem.Claim{exp, c(fmt.Sprint("pad", i))}, [][]byte{[]byte("second"), nil}), []idem.Outcome{A, A}) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the expired record was never taken over")
		}
		time.Sleep(time.Millisecond)
	}
	wantResult("short", "second")

	tx, err := env.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = env.Rollback(ctx, tx) }()
	_, err = r.RecordResultsTx(ctx, tx, []idem.Claim{c("x")}, [][]byte{nil, nil})
	var in *idem.InputError
	if !errors.As(err, &in) || in.Field != "results" {
		t.Fatalf("two results for one claim: err = %v, want an *idem.InputError on results", err)
	}
}
