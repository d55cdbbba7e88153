package idemsqlite_test

import (
	"database/sql"
	"path/filepath"
	"strings"
	"testing"

	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/idemsqlite"
	"github.com/idemhq/idem/migrate"
)

// plansDB returns a fresh SQLite database with sets migrated, filled by the fill
// statements in turn (the last one ANALYZE), for a test of query plans.
func plansDB(t *testing.T, sets []migrate.Set, fill ...string) idemsql.TxDB[*sql.Tx] {
	t.Helper()
	ctx := t.Context()
	sdb, err := sql.Open("sqlite", idemsqlite.DSN(filepath.Join(t.TempDir(), "plans.db"), idemsqlite.Config{}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sdb.Close() })
	db := idemsqlite.TxDB(sdb)
	if err := migrate.Up(ctx, db, sets...); err != nil {
		t.Fatal(err)
	}
	for _, stmt := range fill {
		if err := db.Auto(ctx, func(q idemsql.Querier) error { _, err := q.Exec(ctx, stmt); return err }); err != nil {
			t.Fatalf("%v\n%s", err, stmt)
		}
	}
	return db
}

// queryPlan returns the detail of each step of EXPLAIN QUERY PLAN stmt, a line each.
func queryPlan(t *testing.T, db idemsql.TxDB[*sql.Tx], stmt string, args []any) string {
	t.Helper()
	ctx := t.Context()
	var plan []string
	err := db.Auto(ctx, func(q idemsql.Querier) error {
		return idemsql.EachRow(ctx, q, "EXPLAIN QUERY PLAN "+stmt, args, func(rows idemsql.Rows) error {
			var id, parent, notUsed int64
			var detail string
			err := rows.Scan(&id, &parent, &notUsed, &detail)
			plan = append(plan, detail)
			return err
		})
	})
	if err != nil {
		t.Fatalf("EXPLAIN QUERY PLAN: %v\n%s", err, stmt)
	}
	return strings.Join(plan, "\n")
}
