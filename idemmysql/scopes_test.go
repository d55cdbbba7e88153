package idemmysql_test

import (
	"database/sql"
	"fmt"
	"strings"
	"testing"

	"github.com/idemhq/idem/idemmysql"
	"github.com/idemhq/idem/internal/cursor"
)

// TestScopesPlanUsesLooseIndexScan proves that a Scopes page costs a seek of the
// primary key per scope, not a read of the records: on 200,000 records over 1,000
// scopes, analyzed, EXPLAIN of a page in the middle says "Using index for group-by"
// on PRIMARY, and running it reads the index 11 times for 11 scopes and never steps
// through a scope's records (Handler_read_next 0). It needs MariaDB (its seq_1_to_N
// table fills the records). EXPLAIN printed (MariaDB 10.11):
//
//	type range, key PRIMARY, rows 1001, Extra: Using where; Using index for group-by
func TestScopesPlanUsesLooseIndexScan(t *testing.T) {
	t.Parallel()
	s := newStore(t, "", idemmysql.Config{})
	ctx := ctxFor(t)
	conn, err := s.DB().Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for _, q := range []string{
		`INSERT INTO idem_records (scope, id, state, token, result, retention_us, created_us, expires_us)
		SELECT CONCAT('scope-', LPAD(seq % 1000, 4, '0')), CONCAT('key-', LPAD(seq, 7, '0')), 2, seq, '', 0, 0, 0
		FROM seq_1_to_200000`,
		`ANALYZE TABLE idem_records`,
	} {
		if _, err := conn.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	// id, select_type, table, type, possible_keys, key, key_len, ref, rows, Extra
	var plan [10]sql.NullString
	dest := make([]any, len(plan))
	for i := range plan {
		dest[i] = &plan[i]
	}
	if err := conn.QueryRowContext(ctx, "EXPLAIN "+idemmysql.ScopesQuery(s), "scope-0499", 11).Scan(dest...); err != nil {
		t.Fatal(err)
	}
	typ, key, extra := plan[3].String, plan[5].String, plan[9].String
	t.Logf("EXPLAIN: type %s, key %s, rows %s, Extra: %s", typ, key, plan[8].String, extra)
	if key != "PRIMARY" || !strings.Contains(extra, "Using index for group-by") {
		t.Errorf("Scopes' plan is not a loose scan of the primary key: type %s, key %s, Extra %s", typ, key, extra)
	}
	if _, err := conn.ExecContext(ctx, "FLUSH STATUS"); err != nil {
		t.Fatal(err)
	}
	r, err := conn.QueryContext(ctx, idemmysql.ScopesQuery(s), "scope-0499", 11)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for r.Next() {
		n++
	}
	if err := r.Close(); err != nil || n != 11 {
		t.Fatalf("page of %d scopes, %v; want 11", n, err)
	}
	var name string
	var next int
	if err := conn.QueryRowContext(ctx, "SHOW SESSION STATUS LIKE 'Handler_read_next'").Scan(&name, &next); err != nil {
		t.Fatal(err)
	}
	if next > 11 {
		t.Errorf("the page stepped through %d index entries (Handler_read_next), want at most 11: it read records, not scopes", next)
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
