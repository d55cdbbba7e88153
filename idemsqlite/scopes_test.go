package idemsqlite_test

import (
	"database/sql"
	"fmt"
	"strings"
	"testing"

	"github.com/idemhq/idem/idemsqlite"
	"github.com/idemhq/idem/internal/cursor"
)

// TestScopesPlanSeeksPrimaryKey proves that a Scopes page costs seeks of the primary
// key, not a scan of the records: on 20,000 records over 100 scopes, analyzed, every
// step of the plan searches the primary key by scope and none scans the table. The
// plan it printed:
//
//	CO-ROUTINE s
//	SETUP
//	SCAN CONSTANT ROW
//	SCALAR SUBQUERY 1
//	SEARCH idem_records USING PRIMARY KEY (scope>?)
//	RECURSIVE STEP
//	SCAN s
//	CORRELATED SCALAR SUBQUERY 3
//	SEARCH idem_records USING PRIMARY KEY (scope>?)
//	SCAN s
func TestScopesPlanSeeksPrimaryKey(t *testing.T) {
	t.Parallel()
	s, path := openStore(t, idemsqlite.Config{})
	ctx := ctxFor(t)
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	for _, q := range []string{
		`WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g WHERE n < 20000)
		INSERT INTO idem_records (scope, id, state, token, result, retention_ns, created_ns, expires_ns)
		SELECT printf('scope-%03d', n % 100), printf('key-%06d', n), 2, n, x'', 0, 0, 9e18 FROM g`,
		`ANALYZE`,
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	rows, err := db.QueryContext(ctx, "EXPLAIN QUERY PLAN "+idemsqlite.ScopesQuery, "scope-049", 11)
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for rows.Next() {
		var id, parent, notused int
		var detail string
		if err := rows.Scan(&id, &parent, &notused, &detail); err != nil {
			t.Fatal(err)
		}
		lines = append(lines, detail)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	plan := strings.Join(lines, "\n")
	t.Logf("plan:\n%s", plan)
	if strings.Count(plan, "SEARCH idem_records USING PRIMARY KEY (scope>?)") != 2 {
		t.Errorf("Scopes' plan does not seek the primary key by scope:\n%s", plan)
	}
	if strings.Contains(plan, "SCAN idem_records") || strings.Contains(plan, "TEMP B-TREE") {
		t.Errorf("Scopes' plan scans the records or sorts:\n%s", plan)
	}
	page, err := s.Scopes(ctx, cursor.EncodeScope("scope-049"), 10)
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for i := 50; i < 60; i++ {
		want = append(want, fmt.Sprintf("scope-%03d", i))
	}
	if fmt.Sprint(page.Scopes) != fmt.Sprint(want) || page.Next != cursor.EncodeScope("scope-059") {
		t.Fatalf("page after scope-049: %q, next %q; want %q", page.Scopes, page.Next, want)
	}
	last, err := s.Scopes(ctx, cursor.EncodeScope("scope-095"), 10)
	if err != nil || len(last.Scopes) != 4 || last.Next != "" {
		t.Fatalf("last page: %q, next %q, %v", last.Scopes, last.Next, err)
	}
}
