package idemtest

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemhq/idem"
)

// renewTests are StoreSuite's cases for idem.Renewer. Leases run on the backend's
// own clock, so the cases wait for real (short) leases to pass, as the expiry cases
// do, and never assert how long anything took.
var renewTests = []struct {
	name string
	fn   func(t *testing.T, s idem.Store, r idem.Renewer)
}{
	{"RenewKeepsLiveHolder", testRenewKeepsHolder},
	{"RenewByTakenOverTokenIsLost", testRenewTakenOver},
	{"RenewAfterLeaseRanOutIsLost", testRenewExpired},
	{"RenewOfCompletedKey", testRenewCompleted},
	{"RenewOfReleasedKeyIsLost", testRenewReleased},
	{"RenewBadInput", testRenewBadInput},
	{"RenewRacesTakeoverOneWins", testRenewRace},
}

// renewer returns s as an idem.Renewer, skipping the test for stores without Renew.
func renewer(t *testing.T, s idem.Store) idem.Renewer {
	t.Helper()
	return optional[idem.Renewer](t, s)
}

// optional returns s as the optional interface I, or skips the test for a store
// that does not implement it.
func optional[I any](t *testing.T, s any) I {
	t.Helper()
	i, ok := s.(I)
	if !ok {
		t.Skipf("%T does not implement %v", s, reflect.TypeFor[I]())
	}
	return i
}

// A holder that renews keeps its key after its first lease would have ended, and
// completes normally.
func testRenewKeepsHolder(t *testing.T, s idem.Store, r idem.Renewer) {
	ctx := ctxFor(t)
	const lease = time.Second
	c := idem.Claim{Key: key(t, "k"), Lease: lease}
	claimed := time.Now()
	first := MustClaim(t, s, c)
	wantOutcome(t, first, idem.Acquired)
	if err := r.Renew(ctx, c.Key, first.Token, time.Minute); err != nil {
		if errors.Is(err, idem.ErrLeaseLost) && time.Since(claimed) >= lease {
			t.Skipf("the machine took %s to renew a %s lease", time.Since(claimed), lease)
		}
		t.Fatalf("Renew by the holder: %v", err)
	}
	time.Sleep(time.Until(claimed.Add(lease + 3*shortLease))) // the first lease is over
	dup := MustClaim(t, s, idem.Claim{Key: c.Key, Lease: time.Minute})
	wantOutcome(t, dup, idem.InProgress)
	if err := r.Renew(ctx, c.Key, first.Token, 0); err != nil {
		t.Fatalf("second Renew (default lease): %v", err)
	}
	if err := s.Complete(ctx, c.Key, first.Token, []byte("done")); err != nil {
		t.Fatalf("Complete after renewing: %v", err)
	}
	wantReplay(t, s, c, "done")
}

// A holder whose lease ran out and was taken over cannot renew, and its attempt
// leaves the new holder's lease as it was.
func testRenewTakenOver(t *testing.T, s idem.Store, r idem.Renewer) {
	ctx := ctxFor(t)
	c := idem.Claim{Key: key(t, "k"), Lease: shortLease}
	first := MustClaim(t, s, c)
	wantOutcome(t, first, idem.Acquired)
	second := awaitAcquired(t, s, idem.Claim{Key: c.Key, Lease: time.Minute})
	before := MustClaim(t, s, c)
	wantOutcome(t, before, idem.InProgress)
	if err := r.Renew(ctx, c.Key, first.Token, time.Hour); !errors.Is(err, idem.ErrLeaseLost) {
		t.Fatalf("Renew by the taken-over holder = %v, want ErrLeaseLost", err)
	}
	after := MustClaim(t, s, c)
	wantOutcome(t, after, idem.InProgress)
	if !after.Record.ExpiresAt.Equal(before.Record.ExpiresAt) {
		t.Fatalf("a lost Renew moved the new holder's lease end from %v to %v", before.Record.ExpiresAt, after.Record.ExpiresAt)
	}
	if err := s.Complete(ctx, c.Key, second.Token, []byte("new")); err != nil {
		t.Fatalf("new holder's Complete: %v", err)
	}
}

// A lease that ran out cannot be renewed, even when nobody took the key over.
func testRenewExpired(t *testing.T, s idem.Store, r idem.Renewer) {
	ctx := ctxFor(t)
	c := idem.Claim{Key: key(t, "k"), Lease: 100 * time.Millisecond}
	first := MustClaim(t, s, c)
	wantOutcome(t, first, idem.Acquired)
	time.Sleep(4 * c.Lease)
	if err := r.Renew(ctx, c.Key, first.Token, time.Minute); !errors.Is(err, idem.ErrLeaseLost) {
		t.Fatalf("Renew after the lease ran out = %v, want ErrLeaseLost", err)
	}
	wantOutcome(t, MustClaim(t, s, c), idem.Acquired)
}

func testRenewCompleted(t *testing.T, s idem.Store, r idem.Renewer) {
	ctx := ctxFor(t)
	for _, fp := range [][]byte{nil, []byte("fp")} { // the memory store keeps these two apart
		c := idem.Claim{Key: key(t, fmt.Sprintf("fp-%x", fp)), Fingerprint: fp}
		first := MustClaim(t, s, c)
		wantOutcome(t, first, idem.Acquired)
		if err := s.Complete(ctx, c.Key, first.Token, nil); err != nil {
			t.Fatal(err)
		}
		if err := r.Renew(ctx, c.Key, first.Token, time.Minute); !errors.Is(err, idem.ErrCompleted) {
			t.Fatalf("Renew of a completed key by its holder = %v, want ErrCompleted", err)
		}
		if err := r.Renew(ctx, c.Key, first.Token+1, time.Minute); !errors.Is(err, idem.ErrLeaseLost) {
			t.Fatalf("Renew of a completed key by another token = %v, want ErrLeaseLost", err)
		}
		wantOutcome(t, MustClaim(t, s, c), idem.Replayed)
	}
}

func testRenewReleased(t *testing.T, s idem.Store, r idem.Renewer) {
	ctx := ctxFor(t)
	c := idem.Claim{Key: key(t, "k")}
	first := MustClaim(t, s, c)
	wantOutcome(t, first, idem.Acquired)
	if err := s.Release(ctx, c.Key, first.Token); err != nil {
		t.Fatal(err)
	}
	if err := r.Renew(ctx, c.Key, first.Token, time.Minute); !errors.Is(err, idem.ErrLeaseLost) {
		t.Fatalf("Renew of a released key = %v, want ErrLeaseLost", err)
	}
	// The lost Renew did not bring the released claim back.
	wantOutcome(t, MustClaim(t, s, c), idem.Acquired)
	if err := r.Renew(ctx, key(t, "never-claimed"), 42, time.Minute); !errors.Is(err, idem.ErrLeaseLost) {
		t.Fatalf("Renew of a key with no record = %v, want ErrLeaseLost", err)
	}
}

func testRenewBadInput(t *testing.T, s idem.Store, r idem.Renewer) {
	ctx := ctxFor(t)
	c := idem.Claim{Key: key(t, "k"), Lease: time.Minute}
	held := MustClaim(t, s, c)
	wantOutcome(t, held, idem.Acquired)
	cases := []struct {
		name  string
		key   idem.Key
		token uint64
		lease time.Duration
		field string
	}{
		{"negative lease", c.Key, held.Token, -time.Second, "lease"},
		{"zero token", c.Key, 0, time.Minute, "token"},
		{"empty id", idem.Key{Scope: "s"}, held.Token, time.Minute, "Key.ID"},
	}
	for _, tc := range cases {
		err := r.Renew(ctx, tc.key, tc.token, tc.lease)
		var ie *idem.InputError
		if !errors.As(err, &ie) || ie.Field != tc.field || ie.Fix == "" {
			t.Errorf("%s: Renew = %v, want an *idem.InputError for %s with a fix", tc.name, err, tc.field)
		}
	}
	// The held key is untouched: still the holder's to complete.
	if err := s.Complete(ctx, c.Key, held.Token, nil); err != nil {
		t.Fatalf("Complete after rejected Renews: %v", err)
	}
}

// A holder renews just as its lease ends while others try to take the key over.
// Exactly one side wins: the renewal (and no claim acquires) or one claimant (and
// the renewal is refused). Claimants stop once the renewal has succeeded; a refused
// renewal leaves them claiming until one takes the expired key.
func testRenewRace(t *testing.T, s idem.Store, r idem.Renewer) {
	ctx := ctxFor(t)
	const rounds, claimants = 12, 4
	lease := 60 * time.Millisecond
	var renewWins, claimWins int
	for round := range rounds {
		c := idem.Claim{Key: key(t, fmt.Sprintf("round-%d", round)), Lease: lease}
		first := MustClaim(t, s, c)
		wantOutcome(t, first, idem.Acquired)

		var renewed atomic.Bool
		var acquired atomic.Int64
		var winner atomic.Uint64
		errs := make(chan error, claimants+1)
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(time.Duration(rand.Int64N(int64(2 * lease)))) // before or after the lease ends
			switch err := r.Renew(ctx, c.Key, first.Token, time.Minute); {
			case err == nil:
				renewed.Store(true)
			case !errors.Is(err, idem.ErrLeaseLost):
				//lint:ignore ST1005 the message starts with the method's name
				errs <- fmt.Errorf("Renew: %w", err)
			}
		}()
		for range claimants {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for !renewed.Load() && acquired.Load() == 0 && ctx.Err() == nil {
					res, err := s.Claim(ctx, idem.Claim{Key: c.Key, Lease: time.Minute})
					if err != nil {
						errs <- err
						return
					}
					if res.Outcome == idem.Acquired {
						acquired.Add(1)
						winner.Store(res.Token)
					}
					time.Sleep(time.Millisecond)
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		switch n := acquired.Load(); {
		case renewed.Load() && n == 0:
			renewWins++
			if err := s.Complete(ctx, c.Key, first.Token, nil); err != nil {
				t.Fatalf("round %d: Complete by the renewed holder: %v", round, err)
			}
		case !renewed.Load() && n == 1:
			claimWins++
			if err := s.Complete(ctx, c.Key, first.Token, nil); !errors.Is(err, idem.ErrLeaseLost) {
				t.Fatalf("round %d: Complete by the holder whose renewal lost = %v, want ErrLeaseLost", round, err)
			}
			if err := s.Complete(ctx, c.Key, winner.Load(), nil); err != nil {
				t.Fatalf("round %d: Complete by the claimant that won: %v", round, err)
			}
		default:
			t.Fatalf("round %d: renewed=%v and %d claimants acquired: want exactly one winner", round, renewed.Load(), n)
		}
	}
	t.Logf("renewal won %d rounds, a claimant %d", renewWins, claimWins)
}
