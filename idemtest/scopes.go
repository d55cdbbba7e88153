package idemtest

import (
	"fmt"
	"strings"
	"testing"

	"github.com/idemhq/idem"
)

// testScopes: five scopes, among them a prefix pair and glob and LIKE
// metacharacters, each with a few records, are listed two a page, each once (Redis:
// at least once), "a" before "ab" on ordered stores; bad input is an InputError.
func testScopes(t *testing.T, s inspected) {
	sl, ok := s.Store.(idem.ScopeLister)
	if !ok {
		t.Skipf("%T does not implement idem.ScopeLister", s.Store)
	}
	p := strings.NewReplacer("/", "-").Replace(t.Name()) + "-"
	mine := map[string]int{}
	for i, sc := range []string{"a", "ab", "a%_", "a*?[x]", `b\:1`} {
		mine[p+sc] = 0
		for j := range 3 {
			MustClaim(t, s, idem.Claim{Key: idem.Key{Scope: p + sc, ID: fmt.Sprintf("id-%d-%d", i, j)}})
		}
	}
	ctx := ctxFor(t)
	var (
		cursor string
		all    = map[string]bool{}
	)
	// Other subtests share the store and add scopes meanwhile: a generous bound.
	for pages := 0; ; pages++ {
		if pages > 100000 {
			t.Fatalf("Scopes did not end after %d pages", pages)
		}
		page, err := sl.Scopes(ctx, cursor, 2)
		if err != nil {
			t.Fatalf("Scopes(%q, 2): %v", cursor, err)
		}
		if len(page.Scopes) > 2 {
			t.Fatalf("Scopes page of %d scopes, over the limit 2: %q", len(page.Scopes), page.Scopes)
		}
		if s.ordered() && page.Next != "" && len(page.Scopes) != 2 {
			t.Fatalf("Scopes page of %d scopes before the last, want 2", len(page.Scopes))
		}
		inPage := map[string]bool{}
		for _, sc := range page.Scopes {
			if err := (idem.Key{Scope: sc, ID: "i"}).Validate(); err != nil {
				t.Fatalf("Scopes returned %q, no scope a key can have: %v", sc, err)
			}
			if inPage[sc] || (s.ordered() && all[sc]) {
				t.Fatalf("Scopes returned %q twice", sc)
			}
			// Order is byte order or, on PostgreSQL, the column's collation, in
			// which "a" still comes before "ab".
			if s.ordered() && sc == p+"a" && all[p+"ab"] {
				t.Fatalf("Scopes returned %q after %q: not in ascending order", sc, p+"ab")
			}
			inPage[sc], all[sc] = true, true
			if _, ok := mine[sc]; ok {
				mine[sc]++
			}
		}
		if page.Next == "" {
			break
		}
		cursor = page.Next
	}
	for sc, n := range mine {
		if n == 0 || (s.ordered() && n != 1) {
			t.Fatalf("Scopes listed %q %d times, want once", sc, n)
		}
	}

	for _, limit := range []int{0, -1, idem.MaxListLimit + 1} {
		_, err := sl.Scopes(ctx, "", limit)
		wantInputField(t, fmt.Sprintf("Scopes limit %d", limit), err, "limit")
	}
	for _, c := range []string{"not a cursor!", "\x00\xff", strings.Repeat("Z", 70000)} {
		_, err := sl.Scopes(ctx, c, 10)
		wantInputField(t, fmt.Sprintf("Scopes cursor %.20q", c), err, "cursor")
	}
}
