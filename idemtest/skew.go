package idemtest

import (
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemhq/idem"
)

// SkewHarness makes two nodes of a store that takes its callers' clock (the
// store's Config.Now: idemsqlite), for SkewSuite.
type SkewHarness struct {
	// Nodes returns two stores on one key space, nodes A and B, that read nowA and
	// nowB for their leases and retention (two processes on one database whose
	// clocks disagree). Cleanup is registered on t. Required.
	Nodes func(t *testing.T, nowA, nowB func() time.Time) (a, b idem.Store)
}

// SkewClock is true time that a test moves by hand, and the clocks of nodes off it
// by fixed offsets. It never reads the wall clock, so no case depends on how fast
// the machine is. It is safe for concurrent use.
type SkewClock struct {
	base time.Time
	off  atomic.Int64
}

// NewSkewClock returns a clock that starts at the wall clock's present.
func NewSkewClock() *SkewClock { return &SkewClock{base: time.Now()} }

// Now is true time.
func (c *SkewClock) Now() time.Time { return c.base.Add(time.Duration(c.off.Load())) }

// Advance moves true time, and every node's clock with it, by d.
func (c *SkewClock) Advance(d time.Duration) { c.off.Add(int64(d)) }

// Node returns the clock of a node off true time by d (positive: ahead).
func (c *SkewClock) Node(d time.Duration) func() time.Time {
	return func() time.Time { return c.Now().Add(d) }
}

// SkewSuite shows what two nodes whose clocks disagree do to the leases and the
// retention of a store that takes its callers' clock. Node B's clock runs D ahead
// of node A's (A at true time − D/2, B at + D/2). Such a store compares a record's
// end, written on the writer's clock, with the reader's clock, so B reckons every
// lease and retention A wrote D shorter than A does (and A reckons B's D longer):
//
//   - a lease of length L that A holds (claimed or renewed at true time t) is not
//     taken over by B before t + L − D. With D ≥ L, B takes it over at once: A's
//     Complete and Release then fail with idem.ErrLeaseLost and the token keeps
//     the record right, but the effect A was running may run twice;
//   - a record A completed with retention R at t is remembered by B until t + R − D,
//     and B's Sweep removes it then, not before.
//
// A store that reads the server's clock (Postgres, MySQL, Redis) has no such
// offset: the clocks of its callers do not enter its leases or retention.
func SkewSuite(t *testing.T, h SkewHarness) {
	t.Helper()
	if h.Nodes == nil {
		t.Fatal("idemtest: SkewHarness.Nodes is required")
	}
	const lease = time.Minute
	for _, d := range []time.Duration{0, lease / 2, -lease / 2, lease - time.Second, 2 * lease} {
		t.Run("Lease/"+skewName(d), func(t *testing.T) {
			t.Parallel()
			testSkewLease(t, h, lease, d)
		})
	}
	const retention = time.Hour
	for _, d := range []time.Duration{0, 10 * time.Minute, -10 * time.Minute, 2 * retention} {
		t.Run("Retention/"+skewName(d), func(t *testing.T) {
			t.Parallel()
			testSkewRetention(t, h, retention, d)
		})
	}
}

// skewName names a subtest by B's offset from A.
func skewName(d time.Duration) string {
	switch {
	case d < 0:
		return fmt.Sprintf("B_behind_%v", -d)
	case d > 0:
		return fmt.Sprintf("B_ahead_%v", d)
	}
	return "in_step"
}

// skewNodes returns true time and nodes A (at −d/2) and B (at +d/2).
func skewNodes(t *testing.T, h SkewHarness, d time.Duration) (clock *SkewClock, a, b idem.Store) {
	clock = NewSkewClock()
	a, b = h.Nodes(t, clock.Node(-d/2), clock.Node(d-d/2))
	return clock, a, b
}

// testSkewLease: A claims, B tries while A's lease is live on B's clock, then just
// after it ends there (t + L − D), and takes it over; A is fenced.
func testSkewLease(t *testing.T, h SkewHarness, lease, d time.Duration) {
	ctx := ctxFor(t)
	clock, a, b := skewNodes(t, h, d)
	c := idem.Claim{Key: key(t, "k"), Lease: lease}
	held := MustClaim(t, a, c)
	wantOutcome(t, held, idem.Acquired)
	live := lease - d // how long B leaves A's lease alone, in true time

	if live > time.Millisecond {
		// A renews half way through (where the store renews): the lease then runs
		// from the renewal, past where the claim's would have ended.
		if r, ok := a.(idem.Renewer); ok {
			clock.Advance(live / 2)
			if err := r.Renew(ctx, c.Key, held.Token, lease); err != nil {
				t.Fatalf("A's Renew: %v", err)
			}
		}
		clock.Advance(live - time.Millisecond)
		wantOutcome(t, MustClaim(t, b, c), idem.InProgress)
		clock.Advance(2 * time.Millisecond)
	}
	took := MustClaim(t, b, c)
	wantOutcome(t, took, idem.Acquired) // the skew's cost: A may still be working
	if took.Token <= held.Token {
		t.Fatalf("B's takeover token %d is not above A's %d", took.Token, held.Token)
	}
	if err := a.Complete(ctx, c.Key, held.Token, []byte("A")); !errors.Is(err, idem.ErrLeaseLost) {
		t.Fatalf("A's Complete after B took over = %v, want ErrLeaseLost", err)
	}
	if err := b.Complete(ctx, c.Key, took.Token, []byte("B")); err != nil {
		t.Fatalf("B's Complete: %v", err)
	}
	wantReplay(t, a, c, "B")
}

// testSkewRetention: A completes a record; B remembers it, and does not sweep it,
// until t + R − D, and forgets it just after.
func testSkewRetention(t *testing.T, h SkewHarness, retention, d time.Duration) {
	ctx := ctxFor(t)
	clock, a, b := skewNodes(t, h, d)
	c := idem.Claim{Key: key(t, "k"), Retention: retention}
	res := MustClaim(t, a, c)
	wantOutcome(t, res, idem.Acquired)
	if err := a.Complete(ctx, c.Key, res.Token, []byte("A")); err != nil {
		t.Fatal(err)
	}
	kept := retention - d // how long B remembers A's record, in true time
	sw, sweeps := b.(idem.Sweeper)
	if kept > time.Millisecond {
		clock.Advance(kept - time.Millisecond)
		if sweeps {
			if n, err := sw.Sweep(ctx); err != nil || n != 0 {
				t.Fatalf("B's Sweep %v before A's record ends on B's clock = %d, %v; want 0, nil", time.Millisecond, n, err)
			}
		}
		wantReplay(t, b, c, "A")
		clock.Advance(2 * time.Millisecond)
	}
	if sweeps {
		if n, err := sw.Sweep(ctx); err != nil || n != 1 {
			t.Fatalf("B's Sweep once A's record ended on B's clock = %d, %v; want 1, nil", n, err)
		}
	}
	again := MustClaim(t, b, c)
	wantOutcome(t, again, idem.Acquired) // the skew's cost: B forgot it D early
	if again.Token <= res.Token {
		t.Fatalf("B's token %d after the retention is not above A's %d", again.Token, res.Token)
	}
}
