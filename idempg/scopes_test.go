package idempg_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/idemhq/idem/idempg"
	"github.com/idemhq/idem/internal/cursor"
)

// TestScopesPlanUsesPrimaryKey proves that a Scopes page costs descents of the
// primary key, not a scan of the table: on 200,000 records over 1,000 scopes,
// analyzed, the executed plan (EXPLAIN ANALYZE; plain EXPLAIN leaves the recursive
// step's subplan out) of a page in the middle reads idem_records only through
// idem_records_pkey, one row per descent, with no Seq Scan and no Sort: not the 200
// records each scope holds. The plan it printed (execution 0.12 ms):
//
//	Limit (actual rows=11 loops=1)
//	  CTE walk
//	    ->  Recursive Union (actual rows=11 loops=1)
//	          ->  Limit (actual rows=1 loops=1)
//	                ->  Index Only Scan using idem_records_pkey on idem_records r_1 (actual rows=1 loops=1)
//	                      Index Cond: (scope > 'scope-0499'::text)
//	          ->  WorkTable Scan on walk walk_1 (actual rows=1 loops=10)
//	                Filter: (scope IS NOT NULL)
//	                SubPlan 1
//	                  ->  Limit (actual rows=1 loops=10)
//	                        ->  Index Only Scan using idem_records_pkey on idem_records r (actual rows=1 loops=10)
//	                              Index Cond: (scope > walk_1.scope)
//	  ->  CTE Scan on walk (actual rows=11 loops=1)
//	        Filter: (scope IS NOT NULL)
func TestScopesPlanUsesPrimaryKey(t *testing.T) {
	t.Parallel()
	s, pool := newStore(t, idempg.Config{})
	ctx := ctxFor(t)
	execAll(t, ctx, pool,
		`INSERT INTO idem_records (scope, id, state, fingerprint, token, result, retention, created_at, expires_at)
		SELECT 'scope-' || lpad((g % 1000)::text, 4, '0'), 'key-' || lpad(g::text, 7, '0'), 2, '', g, '',
			interval '1 hour', now(), now() + interval '1 hour'
		FROM generate_series(1, 200000) AS g`,
		`VACUUM ANALYZE idem_records`,
	)
	explain := func(prefix string) string {
		t.Helper()
		return queryPlan(t, ctx, pool, prefix+idempg.ScopesQuery(s), "scope-0499", 11)
	}
	if plan := explain("EXPLAIN "); strings.Contains(plan, "Seq Scan") || strings.Contains(plan, "Sort") {
		t.Errorf("Scopes' plan scans the table or sorts:\n%s", plan)
	}
	analyzed := explain("EXPLAIN (ANALYZE, TIMING OFF, COSTS OFF) ")
	t.Logf("executed plan:\n%s", analyzed)
	if strings.Count(analyzed, "using idem_records_pkey") != 2 {
		t.Errorf("Scopes' plan does not descend the primary key in both steps:\n%s", analyzed)
	}
	if strings.Contains(analyzed, "Seq Scan") || strings.Contains(analyzed, "Sort") {
		t.Errorf("Scopes' plan scans the table or sorts:\n%s", analyzed)
	}
	// The index hands out one row per descent: nowhere near a scope's 200.
	for _, line := range strings.Split(analyzed, "\n") {
		if !strings.Contains(line, "Index Only Scan") && !strings.Contains(line, "Index Scan") {
			continue
		}
		var rows, loops int
		i := strings.Index(line, "(actual rows=")
		if i < 0 {
			t.Fatalf("no actual rows in %q", line)
		}
		if _, err := fmt.Sscanf(line[i:], "(actual rows=%d loops=%d)", &rows, &loops); err != nil {
			t.Fatalf("reading %q: %v", line[i:], err)
		}
		if rows > 1 || loops > 12 {
			t.Errorf("an index step read %d rows in %d loops, want at most 1 row in at most 12 loops: %s", rows, loops, line)
		}
	}
	page, err := s.Scopes(ctx, cursor.EncodeScope("scope-0499"), 10)
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for i := 500; i < 510; i++ {
		want = append(want, fmt.Sprintf("scope-%04d", i))
	}
	if fmt.Sprint(page.Scopes) != fmt.Sprint(want) || page.Next != cursor.EncodeScope("scope-0509") {
		t.Fatalf("page after scope-0499: %q, next %q; want %q", page.Scopes, page.Next, want)
	}
	last, err := s.Scopes(ctx, cursor.EncodeScope("scope-0995"), 10)
	if err != nil || len(last.Scopes) != 4 || last.Next != "" {
		t.Fatalf("last page: %q, next %q, %v", last.Scopes, last.Next, err)
	}
}
