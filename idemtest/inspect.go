package idemtest

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemhq/idem"
)

// InspectorSuite runs the idem.Inspector contract against the stores newStore makes,
// which must also implement idem.Inspector. A store without an idem.Sweeper expires
// records natively (Redis): it may forget an expired record before Inspect sees it,
// and its List pages may be shorter than the limit, unordered, and repeat a key of
// an earlier page (SCAN), though never miss one; every other store must list each key
// once, in ascending id order, with full pages but the last. A store that also
// implements idem.ScopeLister is held to its contract the same way (Redis: at least
// once, unordered); one that does not skips that subtest.
func InspectorSuite(t *testing.T, newStore func(t *testing.T) idem.Store) {
	t.Helper()
	fixture := func(t *testing.T) inspected {
		s := newStore(t)
		in, ok := s.(idem.Inspector)
		if !ok {
			t.Fatalf("idemtest: %T does not implement idem.Inspector (Inspect, List, Evict)", s)
		}
		return inspected{Store: s, in: in}
	}
	runParallel(t, fixture, []subtest[inspected]{
		{"InspectInProgress", testInspectInProgress},
		{"InspectCompleted", testInspectCompleted},
		{"UnknownKeyNotFound", testInspectNotFound},
		{"ExpiredUnsweptIsReturned", testInspectExpired},
		{"ScopeIsolation", testInspectScopes},
		{"ListPaginatesEveryKeyOnce", testListPages},
		{"ListScopePrefixAndMetacharacters", testListMetachars},
		{"ListBadInput", testListBadInput},
		{"EvictCompleted", testEvictCompleted},
		{"EvictInProgressNeedsForce", testEvictNeedsForce},
		{"ForceEvictFencesHolder", testForceEvict},
		{"ForceEvictRacesComplete", testForceEvictRace},
		{"Scopes", testScopes},
	})
}

type inspected struct {
	idem.Store
	in idem.Inspector
}

// ordered reports whether s must list in id order with full pages (see InspectorSuite).
func (s inspected) ordered() bool { _, ok := s.Store.(idem.Sweeper); return ok }

func mustInspect(t *testing.T, s inspected, k idem.Key) idem.Record {
	t.Helper()
	rec, err := s.in.Inspect(ctxFor(t), k)
	if err != nil {
		t.Fatalf("Inspect(%v): %v", k, err)
	}
	if rec.Key != k {
		t.Fatalf("Inspect(%v).Key = %v", k, rec.Key)
	}
	return rec
}

func wantNotFound(t *testing.T, what string, err error) {
	t.Helper()
	if !errors.Is(err, idem.ErrNotFound) {
		t.Fatalf("%s: err = %v, want idem.ErrNotFound", what, err)
	}
}

func wantInputField(t *testing.T, what string, err error, field string) {
	t.Helper()
	var ie *idem.InputError
	if !errors.As(err, &ie) || ie.Field != field {
		t.Fatalf("%s: err = %v, want *idem.InputError on field %q", what, err, field)
	}
}

// near fails t unless got is within a minute of want: the store's clock (a database
// server's, Redis's) is not the test's, but they are not a minute apart.
func near(t *testing.T, what string, got, want time.Time) {
	t.Helper()
	if d := got.Sub(want); d < -time.Minute || d > time.Minute {
		t.Fatalf("%s = %v, want about %v", what, got, want)
	}
}

func testInspectInProgress(t *testing.T, s inspected) {
	k := key(t, "k")
	fp := []byte("fingerprint")
	res := MustClaim(t, s, idem.Claim{Key: k, Fingerprint: fp, Lease: time.Hour})
	wantOutcome(t, res, idem.Acquired)
	rec := mustInspect(t, s, k)
	if rec.State != idem.StateInProgress || rec.Token != res.Token || !bytes.Equal(rec.Fingerprint, fp) || rec.Result != nil {
		t.Fatalf("Inspect = %+v, want in progress with token %d and fingerprint %q, no result", rec, res.Token, fp)
	}
	near(t, "ExpiresAt", rec.ExpiresAt, time.Now().Add(time.Hour))
	if !rec.CreatedAt.IsZero() {
		near(t, "CreatedAt", rec.CreatedAt, time.Now())
	}
}

func testInspectCompleted(t *testing.T, s inspected) {
	for _, tc := range []struct {
		name   string
		fp     []byte
		result []byte
	}{
		{"with_result", []byte("fp"), []byte("body\x00with\xffbytes")},
		{"dedup_only", nil, nil},
	} {
		k := key(t, tc.name)
		res := MustClaim(t, s, idem.Claim{Key: k, Fingerprint: tc.fp, Retention: time.Hour})
		if err := s.Complete(ctxFor(t), k, res.Token, tc.result); err != nil {
			t.Fatal(err)
		}
		rec := mustInspect(t, s, k)
		if rec.State != idem.StateCompleted || !bytes.Equal(rec.Result, tc.result) || !bytes.Equal(rec.Fingerprint, tc.fp) {
			t.Fatalf("%s: Inspect = %+v, want completed with result %q", tc.name, rec, tc.result)
		}
		if rec.Token != res.Token {
			t.Fatalf("%s: Inspect token = %d, want the claim's %d", tc.name, rec.Token, res.Token)
		}
		near(t, tc.name+": ExpiresAt", rec.ExpiresAt, time.Now().Add(time.Hour))
	}
}

func testInspectNotFound(t *testing.T, s inspected) {
	_, err := s.in.Inspect(ctxFor(t), key(t, "never"))
	wantNotFound(t, "Inspect of an unknown key", err)
	_, err = s.in.Evict(ctxFor(t), key(t, "never"), true)
	wantNotFound(t, "Evict of an unknown key", err)
	_, err = s.in.Inspect(ctxFor(t), idem.Key{Scope: "", ID: "x"})
	wantInputField(t, "Inspect of an empty scope", err, "Key.Scope")
}

func testInspectExpired(t *testing.T, s inspected) {
	k := key(t, "k")
	res := MustClaim(t, s, idem.Claim{Key: k, Lease: shortLease})
	rec := mustInspect(t, s, k)
	// Wait until the lease has passed on every clock involved, with a margin.
	for deadline := time.Now().Add(expiryDeadline); time.Now().Before(rec.ExpiresAt.Add(100 * time.Millisecond)); {
		if time.Now().After(deadline) {
			t.Fatalf("lease of %v does not end (ExpiresAt %v)", k, rec.ExpiresAt)
		}
		time.Sleep(20 * time.Millisecond)
	}
	got, err := s.in.Inspect(ctxFor(t), k)
	if errors.Is(err, idem.ErrNotFound) && !s.ordered() {
		return // expired natively (Redis): nothing left to inspect
	}
	if err != nil {
		t.Fatalf("Inspect of an expired, unswept record: %v", err)
	}
	if got.State != idem.StateInProgress || got.Token != res.Token || !got.ExpiresAt.Before(time.Now()) {
		t.Fatalf("Inspect = %+v, want the expired in-progress record of token %d", got, res.Token)
	}
}

func testInspectScopes(t *testing.T, s inspected) {
	a := idem.Key{Scope: "tenant-a", ID: t.Name()}
	b := idem.Key{Scope: "tenant-b", ID: t.Name()}
	res := MustClaim(t, s, idem.Claim{Key: a})
	_, err := s.in.Inspect(ctxFor(t), b)
	wantNotFound(t, "Inspect of the same id in another scope", err)
	_, err = s.in.Evict(ctxFor(t), b, true)
	wantNotFound(t, "Evict of the same id in another scope", err)
	if rec := mustInspect(t, s, a); rec.Token != res.Token {
		t.Fatalf("record of %v changed: %+v", a, rec)
	}
}

// listAll follows List's pages for scope until Next is "" and returns every record
// once, failing t on a page over limit, a repeated id (across pages: on ordered
// stores only), or more pages than could be needed.
func listAll(t *testing.T, s inspected, scope string, limit, want int) []idem.Record {
	t.Helper()
	var all []idem.Record
	seen := map[string]bool{}
	cursor := ""
	// SCAN may return empty pages; a page per key and then some is a generous bound.
	for pages := 0; ; pages++ {
		if pages > 10*want+100 {
			t.Fatalf("List(%q) did not end after %d pages", scope, pages)
		}
		page, err := s.in.List(ctxFor(t), scope, cursor, limit)
		if err != nil {
			t.Fatalf("List(%q, %q, %d): %v", scope, cursor, limit, err)
		}
		if len(page.Records) > limit {
			t.Fatalf("List page of %d records, over the limit %d", len(page.Records), limit)
		}
		if s.ordered() && page.Next != "" && len(page.Records) != limit {
			t.Fatalf("List page of %d records before the last, want %d", len(page.Records), limit)
		}
		inPage := map[string]bool{}
		for _, r := range page.Records {
			if r.Key.Scope != scope {
				t.Fatalf("List(%q) returned %v of another scope", scope, r.Key)
			}
			if seen[r.Key.ID] {
				// SCAN may return a key twice across pages when Redis resizes its
				// table; the caller's set absorbs it. Within a page, never.
				if s.ordered() || inPage[r.Key.ID] {
					t.Fatalf("List(%q) returned %q twice", scope, r.Key.ID)
				}
				continue
			}
			seen[r.Key.ID] = true
			inPage[r.Key.ID] = true
			if s.ordered() && len(all) > 0 && all[len(all)-1].Key.ID >= r.Key.ID {
				t.Fatalf("List(%q) returned %q after %q: not in ascending id order", scope, r.Key.ID, all[len(all)-1].Key.ID)
			}
			all = append(all, r)
		}
		if page.Next == "" {
			return all
		}
		if page.Next == cursor && len(page.Records) == 0 {
			t.Fatalf("List(%q) returned its own cursor %q with no records: it would never end", scope, cursor)
		}
		cursor = page.Next
	}
}

func testListPages(t *testing.T, s inspected) {
	const n, limit = 250, 100
	scope := "list-" + t.Name()
	want := map[string]uint64{} // id -> token
	var mu sync.Mutex
	raceErrs(t, 8, func(w int) error {
		for i := w; i < n; i += 8 {
			k := idem.Key{Scope: scope, ID: fmt.Sprintf("key-%04d", i)}
			res, err := s.Claim(ctxFor(t), idem.Claim{Key: k, Lease: time.Hour})
			if err != nil {
				return err
			}
			if i%2 == 0 {
				if err := s.Complete(ctxFor(t), k, res.Token, []byte(k.ID)); err != nil {
					return err
				}
			}
			mu.Lock()
			want[k.ID] = res.Token
			mu.Unlock()
		}
		return nil
	})
	// Neighbours that must not show up.
	for _, other := range []string{scope + "x", "x" + scope, scope[:len(scope)-1]} {
		MustClaim(t, s, idem.Claim{Key: idem.Key{Scope: other, ID: "key-0001"}})
	}
	got := listAll(t, s, scope, limit, n)
	if len(got) != n {
		t.Fatalf("List visited %d keys, want %d", len(got), n)
	}
	for _, r := range got {
		tok, ok := want[r.Key.ID]
		if !ok {
			t.Fatalf("List returned %q, which was never claimed", r.Key.ID)
		}
		completed := r.Key.ID[len(r.Key.ID)-1]%2 == 0
		if r.Token != tok || (r.State == idem.StateCompleted) != completed {
			t.Fatalf("List record %+v, want token %d, completed %v", r, tok, completed)
		}
		if completed && string(r.Result) != r.Key.ID {
			t.Fatalf("List record of %q has result %q", r.Key.ID, r.Result)
		}
	}
}

func testListMetachars(t *testing.T, s inspected) {
	p := strings.NewReplacer("/", "-").Replace(t.Name()) + "-"
	scopes := []string{"a", "ab", "a*", "a?", "a[", "a[b]", "a]", "a%", "a_", `a\`, `a\*`, "*", "?", "%", "_", `\`, "[a-z]", "a:b", "1:a"}
	for i, sc := range scopes {
		scopes[i] = p + sc
	}
	scopes = append(scopes, "*", "%", "_", "?", "[")
	for i, sc := range scopes {
		for j := range 2 {
			MustClaim(t, s, idem.Claim{Key: idem.Key{Scope: sc, ID: fmt.Sprintf("id-%d-%d", i, j)}})
		}
	}
	for i, sc := range scopes {
		got := listAll(t, s, sc, 1, 2)
		ids := make([]string, len(got))
		for j, r := range got {
			ids[j] = r.Key.ID
		}
		if len(ids) != 2 || !strings.HasPrefix(ids[0], fmt.Sprintf("id-%d-", i)) || !strings.HasPrefix(ids[1], fmt.Sprintf("id-%d-", i)) {
			t.Fatalf("List(%q) = %q, want the 2 ids id-%d-*", sc, ids, i)
		}
	}
}

func testListBadInput(t *testing.T, s inspected) {
	ctx := ctxFor(t)
	MustClaim(t, s, idem.Claim{Key: key(t, "k")})
	for _, limit := range []int{0, -1, idem.MaxListLimit + 1} {
		_, err := s.in.List(ctx, "tenant-a", "", limit)
		wantInputField(t, fmt.Sprintf("List limit %d", limit), err, "limit")
	}
	_, err := s.in.List(ctx, "", "", 10)
	wantInputField(t, "List of an empty scope", err, "scope")
	for _, c := range []string{"not a cursor!", "%%%", "\x00\xff", "{}", strings.Repeat("Z", 4096), "-1", "0:"} {
		_, err := s.in.List(ctx, "tenant-a", c, 10)
		if err == nil {
			continue // some garbage may happen to decode; it must only never panic or leak
		}
		wantInputField(t, fmt.Sprintf("List cursor %q", c), err, "cursor")
	}
	for _, c := range []string{"not a cursor!", "\x00\xff", strings.Repeat("Z", 4096)} {
		_, err := s.in.List(ctx, "tenant-a", c, 10)
		wantInputField(t, fmt.Sprintf("List cursor %q", c), err, "cursor")
	}
}

func testEvictCompleted(t *testing.T, s inspected) {
	k := key(t, "k")
	res := MustClaim(t, s, idem.Claim{Key: k, Fingerprint: []byte("fp")})
	if err := s.Complete(ctxFor(t), k, res.Token, []byte("done")); err != nil {
		t.Fatal(err)
	}
	rec, err := s.in.Evict(ctxFor(t), k, false)
	if err != nil {
		t.Fatalf("Evict of a completed key: %v", err)
	}
	if rec.State != idem.StateCompleted || string(rec.Result) != "done" || rec.Token != res.Token || rec.Key != k {
		t.Fatalf("Evict returned %+v, want the completed record", rec)
	}
	_, err = s.in.Inspect(ctxFor(t), k)
	wantNotFound(t, "Inspect after Evict", err)
	next := MustClaim(t, s, idem.Claim{Key: k, Fingerprint: []byte("other")})
	wantOutcome(t, next, idem.Acquired)
	if next.Token <= res.Token {
		t.Fatalf("token after Evict = %d, not above %d", next.Token, res.Token)
	}
}

func testEvictNeedsForce(t *testing.T, s inspected) {
	k := key(t, "k")
	res := MustClaim(t, s, idem.Claim{Key: k, Lease: time.Hour})
	before := mustInspect(t, s, k)
	_, err := s.in.Evict(ctxFor(t), k, false)
	wantInputField(t, "Evict of an in-progress key without force", err, "force")
	after := mustInspect(t, s, k)
	if after.State != idem.StateInProgress || after.Token != res.Token || !after.ExpiresAt.Equal(before.ExpiresAt) {
		t.Fatalf("record changed by a refused Evict: %+v, was %+v", after, before)
	}
	if err := s.Complete(ctxFor(t), k, res.Token, []byte("ok")); err != nil {
		t.Fatalf("holder's Complete after a refused Evict: %v", err)
	}
}

func testForceEvict(t *testing.T, s inspected) {
	k := key(t, "k")
	ctx := ctxFor(t)
	res := MustClaim(t, s, idem.Claim{Key: k, Lease: time.Hour})
	rec, err := s.in.Evict(ctx, k, true)
	if err != nil {
		t.Fatalf("Evict with force: %v", err)
	}
	if rec.State != idem.StateInProgress || rec.Token != res.Token {
		t.Fatalf("Evict returned %+v, want the in-progress record of token %d", rec, res.Token)
	}
	if err := s.Complete(ctx, k, res.Token, []byte("late")); !errors.Is(err, idem.ErrLeaseLost) {
		t.Fatalf("evicted holder's Complete: %v, want ErrLeaseLost", err)
	}
	if r, ok := s.Store.(idem.Renewer); ok {
		if err := r.Renew(ctx, k, res.Token, time.Hour); !errors.Is(err, idem.ErrLeaseLost) {
			t.Fatalf("evicted holder's Renew: %v, want ErrLeaseLost", err)
		}
	}
	// Before anyone claims the key again it has no record, and releasing a key with no
	// record is a no-op (idem.Store); it must not bring the record back.
	if err := s.Release(ctx, k, res.Token); err != nil && !errors.Is(err, idem.ErrLeaseLost) {
		t.Fatalf("evicted holder's Release: %v, want nil or ErrLeaseLost", err)
	}
	_, err = s.in.Inspect(ctx, k)
	wantNotFound(t, "Inspect after a forced Evict", err)
	next := MustClaim(t, s, idem.Claim{Key: k, Lease: time.Hour})
	wantOutcome(t, next, idem.Acquired)
	if next.Token <= res.Token {
		t.Fatalf("token after a forced Evict = %d, not above the evicted %d", next.Token, res.Token)
	}
	if err := s.Release(ctx, k, res.Token); !errors.Is(err, idem.ErrLeaseLost) {
		t.Fatalf("evicted holder's Release after a new claim: %v, want ErrLeaseLost", err)
	}
	if err := s.Complete(ctx, k, res.Token, []byte("late")); !errors.Is(err, idem.ErrLeaseLost) {
		t.Fatalf("evicted holder's Complete after a new claim: %v, want ErrLeaseLost", err)
	}
	if err := s.Complete(ctx, k, next.Token, []byte("new")); err != nil {
		t.Fatalf("new holder's Complete: %v", err)
	}
	if got := mustInspect(t, s, k); string(got.Result) != "new" || got.Token != next.Token {
		t.Fatalf("record after the new holder completed: %+v", got)
	}
}

func testForceEvictRace(t *testing.T, s inspected) {
	const rounds = 40
	ctx := ctxFor(t)
	evictedFirst, completedFirst := 0, 0
	for i := range rounds {
		k := key(t, fmt.Sprint(i))
		res := MustClaim(t, s, idem.Claim{Key: k, Lease: time.Hour})
		var (
			rec               idem.Record
			evictErr, doneErr error
		)
		race(2, func(g int) {
			if g == 0 {
				rec, evictErr = s.in.Evict(ctx, k, true)
			} else {
				doneErr = s.Complete(ctx, k, res.Token, []byte("r"))
			}
		})
		if evictErr != nil {
			t.Fatalf("round %d: Evict with force: %v", i, evictErr)
		}
		switch {
		case rec.State == idem.StateInProgress:
			// The eviction came first: the holder must have been fenced.
			if !errors.Is(doneErr, idem.ErrLeaseLost) {
				t.Fatalf("round %d: Evict returned the in-progress record, yet the holder's Complete got %v, want ErrLeaseLost", i, doneErr)
			}
			evictedFirst++
		case rec.State == idem.StateCompleted:
			if doneErr != nil || string(rec.Result) != "r" {
				t.Fatalf("round %d: Evict returned %+v, Complete %v", i, rec, doneErr)
			}
			completedFirst++
		default:
			t.Fatalf("round %d: Evict returned %+v", i, rec)
		}
		if got, err := s.in.Inspect(ctx, k); !errors.Is(err, idem.ErrNotFound) {
			t.Fatalf("round %d: after the race Inspect = %+v, %v; want ErrNotFound (no completed record left behind)", i, got, err)
		}
		if next := MustClaim(t, s, idem.Claim{Key: k}); next.Outcome != idem.Acquired || next.Token <= res.Token {
			t.Fatalf("round %d: claim after the race: %+v, want Acquired above token %d", i, next, res.Token)
		}
	}
	t.Logf("evicted first %d times, completed first %d times", evictedFirst, completedFirst)
}
