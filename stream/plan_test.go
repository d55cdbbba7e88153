package stream

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/idemsqlite"
	"github.com/idemhq/idem/internal/testsvc"
)

// A keyed append finds an earlier event with the same key through the partial
// unique index, not by reading the channel: on SQLite, and in the generic plan
// Postgres caches for a prepared statement. Without the index's condition (a key
// that is not empty) in the query, both read every event of the channel, so each
// append cost O(channel).
func TestAppendByKeyUsesIndex(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	t.Run("sqlite", func(t *testing.T) {
		t.Parallel()
		lite, err := idemsqlite.Open(ctx, filepath.Join(t.TempDir(), "plan.db"), idemsqlite.Config{})
		if err != nil {
			t.Fatal(err)
		}
		defer lite.Close()
		db, err := idemsql.SQLDB(ctx, lite.DB())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := NewSQLStore(ctx, db, SQLConfig{}); err != nil {
			t.Fatal(err)
		}
		plan := queryPlan(t, lite.DB(), "EXPLAIN QUERY PLAN "+db.Driver.Stream().EventByKey, "c", "k")
		if !strings.Contains(plan, "idem_stream_events_key") {
			t.Fatalf("plan of StreamSQL.EventByKey does not use idem_stream_events_key:\n%s", plan)
		}
	})
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		raw := testsvc.PostgresDB(t)
		db, err := idemsql.SQLDB(ctx, raw)
		if err != nil {
			t.Fatal(err)
		}
		s, err := NewSQLStore(ctx, db, SQLConfig{})
		if err != nil {
			t.Fatal(err)
		}
		for i := range 2000 { // enough rows that a scan of the channel costs more
			if _, err := s.Append(ctx, "c", Event{Type: "t", ID: "o", Key: fmt.Sprintf("k-%d", i)}); err != nil {
				t.Fatal(err)
			}
		}
		conn, err := raw.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		for _, q := range []string{"ANALYZE idem_stream_events", "SET plan_cache_mode = force_generic_plan",
			"PREPARE by_key(text, text) AS " + strings.NewReplacer("$1", "$1::text", "$2", "$2::text").Replace(db.Driver.Stream().EventByKey)} {
			if _, err := conn.ExecContext(ctx, q); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
		}
		plan := queryPlan(t, conn, "EXPLAIN EXECUTE by_key('c', 'k-7')")
		if !strings.Contains(plan, "idem_stream_events_key") {
			t.Fatalf("generic plan of StreamSQL.EventByKey does not use idem_stream_events_key:\n%s", plan)
		}
	})
}

// queryPlan returns the last column of each row of an EXPLAIN, a line each.
func queryPlan(t *testing.T, q interface {
	QueryContext(context.Context, string, ...any) (*sql.Rows, error)
}, query string, args ...any) string {
	t.Helper()
	rows, err := q.QueryContext(context.Background(), query, args...)
	if err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for rows.Next() {
		vals := make([]any, len(cols))
		for i := range vals {
			vals[i] = new(any)
		}
		if err := rows.Scan(vals...); err != nil {
			t.Fatal(err)
		}
		lines = append(lines, fmt.Sprint(*vals[len(vals)-1].(*any)))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return strings.Join(lines, "\n")
}
