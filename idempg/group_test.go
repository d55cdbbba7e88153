package idempg_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idempg"
	"github.com/idemhq/idem/internal/testsvc"
)

// TestGroupAnswers sends one group holding every case a group meets: fresh keys,
// a key repeated with the same and with another fingerprint, a completed key, and a
// key whose lease ran out (which leaves the group and is taken over alone).
func TestGroupAnswers(t *testing.T) {
	t.Parallel()
	s, pool := newStore(t, idempg.Config{})
	ctx := ctxFor(t)
	k := func(id string) idem.Key { return idem.Key{Scope: "group", ID: id} }
	done, err := s.Claim(ctx, idem.Claim{Key: k("done")})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Complete(ctx, k("done"), done.Token, []byte("result")); err != nil {
		t.Fatal(err)
	}
	old, err := s.Claim(ctx, idem.Claim{Key: k("expired"), Lease: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	// The lease runs out on the database's clock: wait until that clock says so.
	for expired := false; !expired; {
		if err := pool.QueryRow(ctx, `SELECT expires_at <= clock_timestamp() FROM idem_records WHERE id = 'expired'`).Scan(&expired); err != nil {
			t.Fatal(err)
		}
	}

	claims := []idem.Claim{
		{Key: k("b"), Fingerprint: []byte("x")},
		{Key: k("a")},
		{Key: k("b"), Fingerprint: []byte("x")},
		{Key: k("done")},
		{Key: k("expired")},
		{Key: k("b"), Fingerprint: []byte("y")},
	}
	waits := idempg.ClaimAsGroup(s, ctx, claims)
	want := []idem.Outcome{idem.Acquired, idem.Acquired, idem.InProgress, idem.Replayed, idem.Acquired, idem.Mismatch}
	tokens := map[uint64]bool{}
	for i, wait := range waits {
		res, err := wait()
		if err != nil {
			t.Fatalf("claim %d (%s): %v", i, claims[i].Key, err)
		}
		if res.Outcome != want[i] {
			t.Errorf("claim %d (%s): %s, want %s", i, claims[i].Key, res.Outcome, want[i])
		}
		if res.Outcome == idem.Acquired {
			if res.Token == 0 || tokens[res.Token] {
				t.Errorf("claim %d: token %d is zero or repeated", i, res.Token)
			}
			tokens[res.Token] = true
		} else if res.Token != 0 {
			t.Errorf("claim %d: a duplicate got token %d", i, res.Token)
		}
		if i == 3 && string(res.Record.Result) != "result" {
			t.Errorf("replayed result = %q", res.Record.Result)
		}
		if i == 4 && res.Token <= old.Token {
			t.Errorf("takeover token %d is not above the expired holder's %d", res.Token, old.Token)
		}
	}
	if idempg.GroupCalls(s) == 0 {
		t.Fatal("no group call was made")
	}
	// The group's tokens are the holders': they complete.
	r, _ := waits[0]()
	if err := s.Complete(ctx, k("b"), r.Token, nil); err != nil {
		t.Fatalf("complete with the group's token: %v", err)
	}
}

// TestGroupNeverWaitsForALock: a fresh key held by an open transaction elsewhere
// (ClaimTx's uncommitted row) does not hold up the other claims of its group, which
// are answered while that transaction is still open; the held key's claim waits
// for it on its own.
func TestGroupNeverWaitsForALock(t *testing.T) {
	t.Parallel()
	s, pool := newStore(t, idempg.Config{})
	ctx := ctxFor(t)
	held := idem.Key{Scope: "group", ID: "held"}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	r, err := s.ClaimTx(ctx, tx, idem.Claim{Key: held})
	if err != nil || r.Outcome != idem.Acquired {
		t.Fatalf("ClaimTx: %v, %v", r, err)
	}

	claims := []idem.Claim{{Key: held}}
	for i := range 8 {
		claims = append(claims, idem.Claim{Key: idem.Key{Scope: "group", ID: fmt.Sprint("free-", i)}})
	}
	answered := make(chan struct{})
	var waits []func() (idem.Result, error)
	go func() {
		waits = idempg.ClaimAsGroup(s, ctx, claims)
		close(answered)
	}()
	// Not a timing assertion: PostgreSQL's lock wait is unbounded by default, so a
	// group that waited for the held key would still be waiting here.
	select {
	case <-answered:
	case <-time.After(20 * time.Second):
		t.Fatal("the group is waiting for the held key")
	}
	for i, wait := range waits[1:] {
		if res, err := wait(); err != nil || res.Outcome != idem.Acquired {
			t.Fatalf("free key %d while the other is held: %v, %v", i, res.Outcome, err)
		}
	}
	// The held key's claim is still waiting, on its own: commit, and it sees the
	// completed record.
	if err := s.CompleteTx(ctx, tx, held, r.Token, []byte("ok")); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if res, err := waits[0](); err != nil || res.Outcome != idem.Replayed {
		t.Fatalf("held key after commit: %v, %v; want replayed", res.Outcome, err)
	}
}

// TestGroupsUnderLoad: many concurrent callers, so that claims queue and go in
// groups, over keys each claimed by several callers. First each key is acquired
// exactly once, with a token no other key has; then holders release at once, so
// each key is acquired again and again, by one holder at a time, with a token above
// its previous holder's every time. The lease outlasts the test however slow the
// machine is, so a second holder can only be the store's fault.
func TestGroupsUnderLoad(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t, idempg.Config{})
	ctx := ctxFor(t)
	const callers, keys = 48, 200
	type state struct {
		held  bool
		last  uint64
		times int
	}
	var (
		mu     sync.Mutex
		keyed  = map[idem.Key]*state{}
		tokens = map[uint64]idem.Key{}
	)
	run := func(release bool) {
		var wg sync.WaitGroup
		for c := range callers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range keys {
					k := idem.Key{Scope: "load", ID: fmt.Sprint((i + c*7) % keys)}
					res, err := s.Claim(ctx, idem.Claim{Key: k, Lease: time.Hour})
					if err != nil {
						t.Error(err)
						return
					}
					if res.Outcome != idem.Acquired {
						continue
					}
					mu.Lock()
					st := keyed[k]
					if st == nil {
						st = &state{}
						keyed[k] = st
					}
					if st.held {
						t.Errorf("%s acquired (token %d) while held", k, res.Token)
					}
					if res.Token <= st.last {
						t.Errorf("%s: token %d after %d", k, res.Token, st.last)
					}
					if other, ok := tokens[res.Token]; ok {
						t.Errorf("token %d given to %s and %s", res.Token, other, k)
					}
					tokens[res.Token] = k
					st.held, st.last = release, res.Token
					st.times++
					mu.Unlock()
					if release {
						// Not held from here on: the next holder may
						// acquire as soon as the release commits.
						mu.Lock()
						st.held = false
						mu.Unlock()
						if err := s.Release(ctx, k, res.Token); err != nil {
							t.Error(err)
							return
						}
					}
				}
			}()
		}
		wg.Wait()
	}
	run(false)
	if len(keyed) != keys {
		t.Errorf("%d keys acquired, want %d", len(keyed), keys)
	}
	for k, st := range keyed {
		if st.times != 1 {
			t.Errorf("%s acquired %d times", k, st.times)
		}
	}
	calls := idempg.GroupCalls(s)
	if calls == 0 {
		t.Error("no claim went in a group: the test did not test groups")
	}
	// Every key again, released by each holder at once: claim, release, claim…
	for _, st := range keyed {
		st.held = false
	}
	for k, st := range keyed {
		if err := s.Release(ctx, k, st.last); err != nil {
			t.Fatal(err)
		}
	}
	run(true)
	if idempg.GroupCalls(s) == calls {
		t.Error("no claim of the release round went in a group")
	}
}

// TestPgBouncerGroupClaims: a group's arrays pass behind PgBouncer in transaction
// pooling with default_query_exec_mode=exec, and its answers are right there.
func TestPgBouncerGroupClaims(t *testing.T) {
	t.Parallel()
	pooled, _ := bounced(t)
	s, err := idempg.New(ctxFor(t), bouncerPool(t, withParam(t, pooled, "default_query_exec_mode", "exec")),
		idempg.Config{Table: testsvc.UniqueName("rec_")})
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxFor(t)
	k := idem.Key{Scope: "group", ID: "k"}
	claims := []idem.Claim{{Key: k, Fingerprint: []byte{0, 0xff}}, {Key: idem.Key{Scope: "group", ID: "é"}}, {Key: k, Fingerprint: []byte{0, 0xff}}}
	want := []idem.Outcome{idem.Acquired, idem.Acquired, idem.InProgress}
	for i, wait := range idempg.ClaimAsGroup(s, ctx, claims) {
		if res, err := wait(); err != nil || res.Outcome != want[i] {
			t.Fatalf("claim %d: %v, %v; want %s", i, res.Outcome, err, want[i])
		}
	}
	if idempg.GroupCalls(s) != 1 || idempg.HandOffs(s) != 0 {
		t.Fatalf("%d group calls, %d claims handed off; want 1 call answering all", idempg.GroupCalls(s), idempg.HandOffs(s))
	}
}
