package idemtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemhq/idem"
)

// Harness tells StoreSuite how to make stores of one backend.
type Harness struct {
	// New returns a fresh store whose key space no other subtest sees (its own
	// schema, key prefix or file). Cleanup is registered on t. Required.
	New func(t *testing.T) idem.Store
	// Unreachable returns a store whose backend cannot be reached (a closed port).
	// Nil for backends without a network (memory, SQLite).
	Unreachable func(t *testing.T) idem.Store
}

// Concurrency is how many goroutines the suite races on one key.
const Concurrency = 64

// Short lease and retention used where the suite waits for expiry.
const (
	shortLease     = 200 * time.Millisecond
	shortRetention = 200 * time.Millisecond
	expiryDeadline = 10 * time.Second
)

// StoreSuite runs the Store contract against h's backend.
func StoreSuite(t *testing.T, h Harness) {
	t.Helper()
	if h.New == nil {
		t.Fatal("idemtest: Harness.New is required")
	}
	runParallel(t, h.New, []subtest[idem.Store]{
		{"AcquireCompleteReplay", testAcquireCompleteReplay},
		{"ConcurrentClaimsOneWinner", testConcurrentClaimsOneWinner},
		{"ConcurrentClaimCompleteMix", testConcurrentClaimCompleteMix},
		{"ManyKeysConcurrently", testManyKeysConcurrently},
		{"FingerprintMismatch", testFingerprintMismatch},
		{"ScopeIsolation", testScopeIsolation},
		{"LeaseExpiryTakeoverFencesOldHolder", testLeaseExpiry},
		{"ConcurrentTakeoverOneWinner", testConcurrentTakeover},
		{"ReleaseLetsRetryRun", testRelease},
		{"CompleteTwiceIsSafe", testCompleteTwice},
		{"RetentionExpiry", testRetentionExpiry},
		{"SweepCountsExpired", testSweep},
		{"ResultBytesRoundTrip", testResultBytes},
		{"BadInputNamesField", testBadInput},
		{"CancelledContext", testCancelledContext},
		{"BatchClaim", testBatchClaim},
		{"Linearizable", testLinearizable},
	})
	for _, tt := range renewTests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := h.New(t)
			tt.fn(t, s, renewer(t, s))
		})
	}
	if h.Unreachable != nil {
		t.Run("UnreachableBackend", func(t *testing.T) {
			t.Parallel()
			testUnreachable(t, h.Unreachable(t))
		})
	}
}

func key(t *testing.T, suffix string) idem.Key {
	return idem.Key{Scope: "tenant-a", ID: t.Name() + "/" + suffix}
}

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// MustClaim claims c and fails the test on error.
func MustClaim(t *testing.T, s idem.Store, c idem.Claim) idem.Result {
	t.Helper()
	res, err := s.Claim(ctxFor(t), c)
	if err != nil {
		t.Fatalf("Claim(%v): %v", c.Key, err)
	}
	return res
}

func wantOutcome(t *testing.T, res idem.Result, want idem.Outcome) {
	t.Helper()
	if res.Outcome != want {
		t.Fatalf("outcome = %v, want %v (record %+v)", res.Outcome, want, res.Record)
	}
}

// wantReplay claims c and fails t unless the claim replays result; it returns the
// replayed record.
func wantReplay(t *testing.T, s idem.Store, c idem.Claim, result string) idem.Record {
	t.Helper()
	rep := MustClaim(t, s, c)
	wantOutcome(t, rep, idem.Replayed)
	if string(rep.Record.Result) != result {
		t.Fatalf("replayed %q, want %q", rep.Record.Result, result)
	}
	return rep.Record
}

// awaitAcquired claims c until the store says Acquired, failing after expiryDeadline.
// It is how the suite waits for a lease or retention to pass without asserting time.
func awaitAcquired(t *testing.T, s idem.Store, c idem.Claim) idem.Result {
	t.Helper()
	deadline := time.Now().Add(expiryDeadline)
	for {
		res := MustClaim(t, s, c)
		if res.Outcome == idem.Acquired {
			return res
		}
		if time.Now().After(deadline) {
			t.Fatalf("key %v not claimable %s after its expiry; last outcome %v", c.Key, expiryDeadline, res.Outcome)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// claimWithin claims c, which must answer want while the lease or retention that
// began after start has not run out. A machine too slow to claim within it may
// find it over (Acquired): that answer is returned, and t fails only if less than
// span had passed, so no case depends on how fast the machine is.
func claimWithin(t *testing.T, s idem.Store, c idem.Claim, start time.Time, span time.Duration, want idem.Outcome) idem.Result {
	t.Helper()
	res := MustClaim(t, s, c)
	if res.Outcome != want && (res.Outcome != idem.Acquired || time.Since(start) < span) {
		wantOutcome(t, res, want)
	}
	return res
}

func testAcquireCompleteReplay(t *testing.T, s idem.Store) {
	ctx := ctxFor(t)
	c := idem.Claim{Key: key(t, "k"), Fingerprint: []byte("fp")}
	res := MustClaim(t, s, c)
	wantOutcome(t, res, idem.Acquired)
	if res.Token == 0 {
		t.Fatal("Acquired claim has token 0")
	}
	// While in progress, a second claim sees the live lease.
	again := MustClaim(t, s, c)
	wantOutcome(t, again, idem.InProgress)
	if again.Token != 0 || again.Record.Token != 0 {
		t.Fatalf("InProgress result shows a token (%d, record %d): only the holder may know it", again.Token, again.Record.Token)
	}
	if again.Record.State != idem.StateInProgress || !again.Record.ExpiresAt.After(time.Now().Add(-time.Second)) {
		t.Fatalf("InProgress record = %+v, want state in_progress with a lease end", again.Record)
	}
	if err := s.Complete(ctx, c.Key, res.Token, []byte("result-1")); err != nil {
		t.Fatalf("Complete: %v", err)
	}
	rec := wantReplay(t, s, c, "result-1")
	if rec.State != idem.StateCompleted {
		t.Fatalf("Replayed record = %+v, want completed", rec)
	}
	if rec.Key != c.Key {
		t.Fatalf("Replayed record key = %v, want %v", rec.Key, c.Key)
	}
}

// subtest is one test of a suite, run on a fixture F made for it.
type subtest[F any] struct {
	name string
	fn   func(*testing.T, F)
}

// runParallel runs every test as a parallel subtest of t, each on its own fixture.
func runParallel[F any](t *testing.T, fixture func(*testing.T) F, tests []subtest[F]) {
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tt.fn(t, fixture(t))
		})
	}
}

// race starts n goroutines that all call fn at once and waits for them.
func race(n int, fn func(i int)) {
	var start, done sync.WaitGroup
	start.Add(1)
	done.Add(n)
	for i := range n {
		go func() {
			defer done.Done()
			start.Wait()
			fn(i)
		}()
	}
	start.Done()
	done.Wait()
}

// raceErrs is race for an fn that can fail: t fails with every error fn returned.
func raceErrs(t *testing.T, n int, fn func(i int) error) {
	t.Helper()
	errs := make([]error, n)
	race(n, func(i int) { errs[i] = fn(i) })
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
}

func testConcurrentClaimsOneWinner(t *testing.T, s idem.Store) {
	ctx := ctxFor(t)
	c := idem.Claim{Key: key(t, "hot"), Fingerprint: []byte("fp")}
	var acquired, inProgress atomic.Int64
	var winner atomic.Uint64
	raceErrs(t, Concurrency, func(int) error {
		res, err := s.Claim(ctx, c)
		if err != nil {
			return err
		}
		switch res.Outcome {
		case idem.Acquired:
			acquired.Add(1)
			winner.Store(res.Token)
		case idem.InProgress:
			inProgress.Add(1)
		default:
			return fmt.Errorf("unexpected outcome %v", res.Outcome)
		}
		return nil
	})
	if acquired.Load() != 1 || inProgress.Load() != Concurrency-1 {
		t.Fatalf("acquired=%d in_progress=%d, want 1 and %d", acquired.Load(), inProgress.Load(), Concurrency-1)
	}
	if err := s.Complete(ctx, c.Key, winner.Load(), []byte("done")); err != nil {
		t.Fatalf("Complete: %v", err)
	}
	var replayed atomic.Int64
	race(Concurrency, func(int) {
		res, err := s.Claim(ctx, c)
		if err == nil && res.Outcome == idem.Replayed && string(res.Record.Result) == "done" {
			replayed.Add(1)
		}
	})
	if replayed.Load() != Concurrency {
		t.Fatalf("after Complete, %d of %d claims replayed the result", replayed.Load(), Concurrency)
	}
}

// Each goroutine claims and, if it wins, completes at once: whatever the interleaving,
// exactly one runs the effect and every other sees InProgress or the stored result.
func testConcurrentClaimCompleteMix(t *testing.T, s idem.Store) {
	ctx := ctxFor(t)
	c := idem.Claim{Key: key(t, "mix")}
	exactlyOne(t, "claimants ran the effect", func() (bool, error) {
		res, err := s.Claim(ctx, c)
		if err != nil {
			return false, err
		}
		switch res.Outcome {
		case idem.Acquired:
			return true, s.Complete(ctx, c.Key, res.Token, []byte("effect"))
		case idem.Replayed:
			if string(res.Record.Result) != "effect" {
				return false, fmt.Errorf("replayed result %q, want %q", res.Record.Result, "effect")
			}
		case idem.InProgress:
		default:
			return false, fmt.Errorf("unexpected outcome %v", res.Outcome)
		}
		return false, nil
	})
}

// exactlyOne races Concurrency goroutines through try and fails t unless exactly one
// of them won (what names the winners in the message) and none failed.
func exactlyOne(t *testing.T, what string, try func() (won bool, err error)) {
	t.Helper()
	var won atomic.Int64
	raceErrs(t, Concurrency, func(int) error {
		w, err := try()
		if w {
			won.Add(1)
		}
		return err
	})
	if n := won.Load(); n != 1 {
		t.Fatalf("%d %s, want exactly 1", n, what)
	}
}

func testManyKeysConcurrently(t *testing.T, s idem.Store) {
	ctx := ctxFor(t)
	const workers, perWorker = 8, 50
	var acquired atomic.Int64
	raceErrs(t, workers, func(w int) error {
		for i := range perWorker {
			k := key(t, fmt.Sprintf("w%d-%d", w, i))
			res, err := s.Claim(ctx, idem.Claim{Key: k})
			if err != nil {
				return err
			}
			if res.Outcome != idem.Acquired {
				return fmt.Errorf("fresh key %v: outcome %v", k, res.Outcome)
			}
			acquired.Add(1)
			if err := s.Complete(ctx, k, res.Token, nil); err != nil {
				return err
			}
		}
		return nil
	})
	if acquired.Load() != workers*perWorker {
		t.Fatalf("acquired %d fresh keys, want %d", acquired.Load(), workers*perWorker)
	}
	res := MustClaim(t, s, idem.Claim{Key: key(t, "w3-7")})
	wantOutcome(t, res, idem.Replayed)
}

func testFingerprintMismatch(t *testing.T, s idem.Store) {
	ctx := ctxFor(t)
	k := key(t, "k")
	a := idem.Claim{Key: k, Fingerprint: []byte("POST /charges amount=100")}
	b := idem.Claim{Key: k, Fingerprint: []byte("POST /charges amount=999")}
	res := MustClaim(t, s, a)
	wantOutcome(t, res, idem.Acquired)
	mm := MustClaim(t, s, b)
	wantOutcome(t, mm, idem.Mismatch)
	if mm.Record.Token != 0 {
		t.Fatalf("Mismatch record shows the holder's token %d", mm.Record.Token)
	}
	if !bytes.Equal(mm.Record.Fingerprint, a.Fingerprint) {
		t.Fatalf("Mismatch record fingerprint = %q, want the first claim's %q", mm.Record.Fingerprint, a.Fingerprint)
	}
	if err := s.Complete(ctx, k, res.Token, []byte("charged 100")); err != nil {
		t.Fatal(err)
	}
	mm = MustClaim(t, s, b)
	wantOutcome(t, mm, idem.Mismatch)
	if mm.Record.Result != nil {
		t.Fatalf("Mismatch leaked the first intent's result %q", mm.Record.Result)
	}
	wantReplay(t, s, a, "charged 100") // the mismatching claim changed nothing
	// Nil and empty fingerprints are the same intent.
	k2 := key(t, "nil-vs-empty")
	res2 := MustClaim(t, s, idem.Claim{Key: k2})
	if err := s.Complete(ctx, k2, res2.Token, nil); err != nil {
		t.Fatal(err)
	}
	wantOutcome(t, MustClaim(t, s, idem.Claim{Key: k2, Fingerprint: []byte{}}), idem.Replayed)
}

func testScopeIsolation(t *testing.T, s idem.Store) {
	ctx := ctxFor(t)
	a := idem.Key{Scope: "tenant-a", ID: t.Name()}
	b := idem.Key{Scope: "tenant-b", ID: t.Name()}
	res := MustClaim(t, s, idem.Claim{Key: a})
	if err := s.Complete(ctx, a, res.Token, []byte("tenant a's secret")); err != nil {
		t.Fatal(err)
	}
	other := MustClaim(t, s, idem.Claim{Key: b})
	wantOutcome(t, other, idem.Acquired)
	if other.Record.Result != nil {
		t.Fatalf("tenant b saw a result %q", other.Record.Result)
	}
	// Scope and ID must not be joined ambiguously: ("x", "y:z") is not ("x:y", "z").
	for _, k := range []idem.Key{{Scope: "x", ID: "y:z" + t.Name()}, {Scope: "x:y", ID: "z" + t.Name()}, {Scope: "x/y", ID: "z" + t.Name()}} {
		wantOutcome(t, MustClaim(t, s, idem.Claim{Key: k}), idem.Acquired)
	}
}

func testLeaseExpiry(t *testing.T, s idem.Store) {
	ctx := ctxFor(t)
	c := idem.Claim{Key: key(t, "k"), Lease: shortLease, Fingerprint: []byte("fp")}
	start := time.Now()
	first := MustClaim(t, s, c)
	wantOutcome(t, first, idem.Acquired)

	// The holder "crashes"; after the lease another claimant takes over, with a long
	// lease of its own so that it still holds the key however slow the machine is.
	long := c
	long.Lease = time.Minute
	second := claimWithin(t, s, long, start, c.Lease, idem.InProgress)
	if second.Outcome != idem.Acquired {
		second = awaitAcquired(t, s, long)
	}
	if second.Token <= first.Token {
		t.Fatalf("takeover token %d is not above the crashed holder's %d", second.Token, first.Token)
	}
	// The old holder wakes up: its late writes are fenced.
	if err := s.Complete(ctx, c.Key, first.Token, []byte("stale")); !errors.Is(err, idem.ErrLeaseLost) {
		t.Fatalf("old holder's Complete = %v, want ErrLeaseLost", err)
	}
	if err := s.Release(ctx, c.Key, first.Token); !errors.Is(err, idem.ErrLeaseLost) {
		t.Fatalf("old holder's Release = %v, want ErrLeaseLost", err)
	}
	if err := s.Complete(ctx, c.Key, second.Token, []byte("fresh")); err != nil {
		t.Fatalf("new holder's Complete: %v", err)
	}
	wantReplay(t, s, long, "fresh") // the new holder's result
}

// Many claimants find the same expired lease at once: exactly one takes it over.
func testConcurrentTakeover(t *testing.T, s idem.Store) {
	ctx := ctxFor(t)
	c := idem.Claim{Key: key(t, "k"), Lease: 100 * time.Millisecond}
	first := MustClaim(t, s, c)
	wantOutcome(t, first, idem.Acquired)
	time.Sleep(4 * c.Lease) // the holder crashed; its lease runs out
	exactlyOne(t, "claimants took over the expired key", func() (bool, error) {
		res, err := s.Claim(ctx, idem.Claim{Key: c.Key, Lease: time.Minute})
		switch {
		case err != nil:
			return false, err
		case res.Outcome == idem.Acquired && res.Token <= first.Token:
			return true, fmt.Errorf("takeover token %d not above the expired holder's %d", res.Token, first.Token)
		case res.Outcome != idem.Acquired && res.Outcome != idem.InProgress:
			return false, fmt.Errorf("unexpected outcome %v", res.Outcome)
		}
		return res.Outcome == idem.Acquired, nil
	})
}

func testRelease(t *testing.T, s idem.Store) {
	ctx := ctxFor(t)
	c := idem.Claim{Key: key(t, "k")}
	first := MustClaim(t, s, c)
	wantOutcome(t, first, idem.Acquired)
	if err := s.Release(ctx, c.Key, first.Token+1); !errors.Is(err, idem.ErrLeaseLost) {
		t.Fatalf("Release with a wrong token = %v, want ErrLeaseLost", err)
	}
	if err := s.Release(ctx, c.Key, first.Token); err != nil {
		t.Fatalf("Release: %v", err)
	}
	second := MustClaim(t, s, c)
	wantOutcome(t, second, idem.Acquired)
	if second.Token <= first.Token {
		t.Fatalf("token after release %d is not above the released %d", second.Token, first.Token)
	}
	// The released holder is fenced from the new incarnation of the key.
	if err := s.Complete(ctx, c.Key, first.Token, []byte("late")); !errors.Is(err, idem.ErrLeaseLost) {
		t.Fatalf("released holder's Complete = %v, want ErrLeaseLost", err)
	}
	if err := s.Complete(ctx, c.Key, second.Token, []byte("ok")); err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx, c.Key, second.Token); !errors.Is(err, idem.ErrCompleted) {
		t.Fatalf("Release of a completed key = %v, want ErrCompleted", err)
	}
	if err := s.Release(ctx, key(t, "never-claimed"), 42); err != nil {
		t.Fatalf("Release of a key with no record = %v, want nil", err)
	}
	if err := s.Complete(ctx, key(t, "never-claimed"), 42, nil); !errors.Is(err, idem.ErrLeaseLost) {
		t.Fatalf("Complete of a key with no record = %v, want ErrLeaseLost", err)
	}
}

func testCompleteTwice(t *testing.T, s idem.Store) {
	ctx := ctxFor(t)
	c := idem.Claim{Key: key(t, "k")}
	res := MustClaim(t, s, c)
	if err := s.Complete(ctx, c.Key, res.Token, []byte("first")); err != nil {
		t.Fatal(err)
	}
	if err := s.Complete(ctx, c.Key, res.Token, []byte("second")); err != nil {
		t.Fatalf("second Complete with the same token = %v, want nil", err)
	}
	wantReplay(t, s, c, "first")
	if err := s.Complete(ctx, c.Key, res.Token+1, []byte("other")); !errors.Is(err, idem.ErrLeaseLost) {
		t.Fatalf("Complete with another token = %v, want ErrLeaseLost", err)
	}
}

func testRetentionExpiry(t *testing.T, s idem.Store) {
	ctx := ctxFor(t)
	c := idem.Claim{Key: key(t, "k"), Retention: shortRetention}
	res := MustClaim(t, s, c)
	start := time.Now()
	if err := s.Complete(ctx, c.Key, res.Token, []byte("old")); err != nil {
		t.Fatal(err)
	}
	again := claimWithin(t, s, c, start, c.Retention, idem.Replayed)
	if again.Outcome != idem.Acquired {
		again = awaitAcquired(t, s, c)
	}
	if again.Token <= res.Token {
		t.Fatalf("token after retention %d is not above the expired %d", again.Token, res.Token)
	}
	// A long-retention key completed at the same time is still remembered.
	long := idem.Claim{Key: key(t, "long")}
	lr := MustClaim(t, s, long)
	if err := s.Complete(ctx, long.Key, lr.Token, nil); err != nil {
		t.Fatal(err)
	}
	wantOutcome(t, MustClaim(t, s, long), idem.Replayed)
}

func testSweep(t *testing.T, s idem.Store) {
	sw := optional[idem.Sweeper](t, s) // Redis expires records natively
	ctx := ctxFor(t)
	const n = 20
	for i := range n {
		k := key(t, fmt.Sprintf("short-%d", i))
		// Half completed, half abandoned in progress: both expire. Only the abandoned
		// keys get the short lease: a completed one must not lose its lease between
		// Claim and Complete on a loaded machine (its retention counts from Complete).
		completed := i%2 == 0
		c := idem.Claim{Key: k, Retention: shortRetention, Lease: shortLease}
		if completed {
			c.Lease = 0
		}
		res := MustClaim(t, s, c)
		if completed {
			if err := s.Complete(ctx, k, res.Token, []byte("x")); err != nil {
				t.Fatal(err)
			}
		}
	}
	kept := key(t, "kept")
	kr := MustClaim(t, s, idem.Claim{Key: kept})
	if err := s.Complete(ctx, kept, kr.Token, []byte("kept")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(shortRetention + shortLease) // let every short record expire
	swept := 0
	deadline := time.Now().Add(expiryDeadline)
	for swept < n && time.Now().Before(deadline) {
		got, err := sw.Sweep(ctx)
		if err != nil {
			t.Fatalf("Sweep: %v", err)
		}
		swept += got
		if swept < n {
			time.Sleep(20 * time.Millisecond)
		}
	}
	if swept != n {
		t.Fatalf("Sweep removed %d records, want %d", swept, n)
	}
	if got, err := sw.Sweep(ctx); err != nil || got != 0 {
		t.Fatalf("second Sweep = %d, %v; want 0, nil", got, err)
	}
	rep := MustClaim(t, s, idem.Claim{Key: kept})
	wantOutcome(t, rep, idem.Replayed)
}

func testResultBytes(t *testing.T, s idem.Store) {
	ctx := ctxFor(t)
	big := bytes.Repeat([]byte{0, 1, 2, 0xff, '\n'}, 200_000) // 1 MB with NULs and high bytes
	for name, result := range map[string][]byte{"empty": {}, "binary": big, "text": []byte(`{"id":"ch_1"}`)} {
		k := key(t, name)
		res := MustClaim(t, s, idem.Claim{Key: k})
		if err := s.Complete(ctx, k, res.Token, result); err != nil {
			t.Fatalf("%s: Complete: %v", name, err)
		}
		rep := MustClaim(t, s, idem.Claim{Key: k})
		wantOutcome(t, rep, idem.Replayed)
		if !bytes.Equal(rep.Record.Result, result) {
			t.Fatalf("%s: replayed %d bytes, want the %d stored", name, len(rep.Record.Result), len(result))
		}
	}
}

func testBadInput(t *testing.T, s idem.Store) {
	ctx := ctxFor(t)
	good := key(t, "k")
	long := strings.Repeat("k", idem.MaxKeyLen+1)
	cases := []struct {
		name  string
		claim idem.Claim
		field string
	}{
		{"empty scope", idem.Claim{Key: idem.Key{ID: "x"}}, "Key.Scope"},
		{"empty id", idem.Claim{Key: idem.Key{Scope: "s"}}, "Key.ID"},
		{"long id", idem.Claim{Key: idem.Key{Scope: "s", ID: long}}, "Key.ID"},
		{"long scope", idem.Claim{Key: idem.Key{Scope: long, ID: "x"}}, "Key.Scope"},
		{"control char", idem.Claim{Key: idem.Key{Scope: "s", ID: "a\x00b"}}, "Key.ID"},
		{"bad utf8", idem.Claim{Key: idem.Key{Scope: "s", ID: "a\xffb"}}, "Key.ID"},
		{"negative lease", idem.Claim{Key: good, Lease: -time.Second}, "Claim.Lease"},
		{"negative retention", idem.Claim{Key: good, Retention: -time.Second}, "Claim.Retention"},
		{"huge fingerprint", idem.Claim{Key: good, Fingerprint: make([]byte, 1024)}, "Claim.Fingerprint"},
	}
	for _, tc := range cases {
		_, err := s.Claim(ctx, tc.claim)
		var ie *idem.InputError
		if !errors.As(err, &ie) || ie.Field != tc.field || !errors.Is(err, idem.ErrInvalid) {
			t.Errorf("%s: err = %v, want an *idem.InputError for %s", tc.name, err, tc.field)
			continue
		}
		if !strings.Contains(err.Error(), tc.field) || ie.Fix == "" {
			t.Errorf("%s: message %q does not name %s and a fix", tc.name, err, tc.field)
		}
		if idem.IsRetryable(err) {
			t.Errorf("%s: input error reported as retryable", tc.name)
		}
	}
	if err := s.Complete(ctx, idem.Key{Scope: "s"}, 1, nil); !errors.Is(err, idem.ErrInvalid) {
		t.Errorf("Complete with an empty ID = %v, want ErrInvalid", err)
	}
	if err := s.Release(ctx, idem.Key{ID: "x"}, 1); !errors.Is(err, idem.ErrInvalid) {
		t.Errorf("Release with an empty scope = %v, want ErrInvalid", err)
	}
	if err := s.Complete(ctx, good, 0, nil); !errors.Is(err, idem.ErrInvalid) {
		t.Errorf("Complete with token 0 = %v, want ErrInvalid", err)
	}
	// Nothing was half-written by the rejected claims of the good key.
	wantOutcome(t, MustClaim(t, s, idem.Claim{Key: good}), idem.Acquired)
}

func testCancelledContext(t *testing.T, s idem.Store) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	c := idem.Claim{Key: key(t, "k")}
	if _, err := s.Claim(ctx, c); !errors.Is(err, context.Canceled) {
		t.Fatalf("Claim with a cancelled context = %v, want context.Canceled", err)
	}
	if err := s.Complete(ctx, c.Key, 1, nil); !errors.Is(err, context.Canceled) {
		t.Fatalf("Complete with a cancelled context = %v, want context.Canceled", err)
	}
	// Nothing was written: the key is free.
	wantOutcome(t, MustClaim(t, s, c), idem.Acquired)
}

func testBatchClaim(t *testing.T, s idem.Store) {
	bc := optional[idem.BatchClaimer](t, s)
	ctx := ctxFor(t)
	done := key(t, "done")
	res := MustClaim(t, s, idem.Claim{Key: done})
	if err := s.Complete(ctx, done, res.Token, []byte("r")); err != nil {
		t.Fatal(err)
	}
	claims := []idem.Claim{{Key: key(t, "a")}, {Key: done}, {Key: key(t, "b")}, {Key: key(t, "a")}}
	got, err := bc.ClaimBatch(ctx, claims)
	if err != nil {
		t.Fatalf("ClaimBatch: %v", err)
	}
	want := []idem.Outcome{idem.Acquired, idem.Replayed, idem.Acquired, idem.InProgress}
	if len(got) != len(want) {
		t.Fatalf("ClaimBatch returned %d results for %d claims", len(got), len(claims))
	}
	for i := range want {
		if got[i].Outcome != want[i] {
			t.Fatalf("claim %d (%v): outcome %v, want %v", i, claims[i].Key, got[i].Outcome, want[i])
		}
	}
	if string(got[1].Record.Result) != "r" {
		t.Fatalf("batched replay result %q, want %q", got[1].Record.Result, "r")
	}
	if err := s.Complete(ctx, claims[0].Key, got[0].Token, nil); err != nil {
		t.Fatalf("Complete after ClaimBatch: %v", err)
	}
	// A bad claim fails the whole batch before anything is written.
	_, err = bc.ClaimBatch(ctx, []idem.Claim{{Key: key(t, "c")}, {Key: idem.Key{Scope: "s"}}})
	if !errors.Is(err, idem.ErrInvalid) {
		t.Fatalf("ClaimBatch with an empty ID = %v, want ErrInvalid", err)
	}
	wantOutcome(t, MustClaim(t, s, idem.Claim{Key: key(t, "c")}), idem.Acquired)
}

func testUnreachable(t *testing.T, s idem.Store) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err := s.Claim(ctx, idem.Claim{Key: key(t, "k")})
	var be *idem.BackendError
	if !errors.As(err, &be) {
		t.Fatalf("Claim on an unreachable backend = %v, want an *idem.BackendError", err)
	}
	if be.Backend == "" || be.Op != "claim" || !idem.IsRetryable(err) {
		t.Fatalf("BackendError = %+v (retryable %v), want backend named, op claim, retryable", be, idem.IsRetryable(err))
	}
}
