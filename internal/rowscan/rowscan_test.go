package rowscan_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"

	"github.com/idemhq/idem/internal/rowscan"
	"github.com/idemhq/idem/internal/sqltest"
)

// On SQLite, which keeps text in an INTEGER column, the row with text where a
// number belongs is read with what fits and the column named; the rows after it
// are read as usual.
func TestScanSQLiteValueOfAnotherType(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := sqltest.SQLite(t)
	err := db.InTx(ctx, func(tx *sql.Tx) error {
		for _, stmt := range []string{
			`CREATE TABLE t (id INTEGER PRIMARY KEY, name TEXT NOT NULL, n INTEGER NOT NULL, at INTEGER)`,
			`INSERT INTO t VALUES (1, 'good', 7, 70), (2, 'bad', 'seven', '` + strings.Repeat("x", 1000) + `'), (3, 'after', 9, NULL)`,
		} {
			if _, err := tx.ExecContext(ctx, stmt); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	type row struct {
		id, n int64
		name  string
		at    *int64
		bad   string
	}
	var got []row
	err = db.InTx(ctx, func(tx *sql.Tx) error {
		rows, err := db.Querier(tx).Query(ctx, `SELECT id, name, n, at FROM t ORDER BY id`)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var r row
			if r.bad, err = rowscan.Scan(rows, []string{"id", "name", "n", "at"}, &r.id, &r.name, &r.n, &r.at); err != nil {
				return err
			}
			got = append(got, r)
		}
		return rows.Err()
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || got[0].bad != "" || got[0].n != 7 || got[2].bad != "" || got[2].name != "after" || got[2].n != 9 {
		t.Fatalf("rows %+v", got)
	}
	bad := got[1]
	if bad.id != 2 || bad.name != "bad" || bad.n != 0 || bad.at != nil ||
		!strings.HasPrefix(bad.bad, `n: converting driver.Value type string ("seven") to a int64`) || !strings.Contains(bad.bad, "; at: ") {
		t.Fatalf("bad row %+v", bad)
	}
	if len(bad.bad) > 2*(rowscan.MaxProblemLen+len("…"))+len("; ") {
		t.Fatalf("problem of %d bytes: not bounded", len(bad.bad))
	}
}

// failingRow fails every Scan, as a pgx row does once a Scan failed.
type failingRow struct{ err error }

func (r failingRow) Scan(...any) error { return r.err }

func TestScanRowThatCannotBeReadAgain(t *testing.T) {
	t.Parallel()
	gone := errors.New("conn closed")
	var n int64
	if bad, err := rowscan.Scan(failingRow{gone}, []string{"n"}, &n); !errors.Is(err, gone) || bad != "" {
		t.Fatalf("Scan = %q, %v; want the row's error", bad, err)
	}
}

func TestJSONAndJoin(t *testing.T) {
	t.Parallel()
	var h map[string]string
	if p := rowscan.JSON("headers", `{"a":"b"}`, &h, "a JSON object of strings"); p != "" || h["a"] != "b" {
		t.Fatalf("good headers: %q %v", p, h)
	}
	for _, text := range []string{"not json", `{"n":1}`, `[]`, ``} {
		var h map[string]string
		p := rowscan.JSON("headers", text, &h, "a JSON object of strings")
		if !strings.HasPrefix(p, "headers: not a JSON object of strings (") {
			t.Errorf("headers %q: problem %q", text, p)
		}
	}
	if got := rowscan.Join("", "a", "", "b"); got != "a; b" {
		t.Errorf("Join = %q", got)
	}
	if got := rowscan.Join(strings.Repeat("é", 200)); len(got) > rowscan.MaxProblemLen+len("…") || !strings.HasSuffix(got, "…") {
		t.Errorf("Join of a long problem = %d bytes", len(got))
	}
}
