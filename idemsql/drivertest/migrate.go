package drivertest

import (
	"context"
	"database/sql"
	"fmt"
	"testing"

	"github.com/idemhq/idem/idemsql"
)

// Migrate checks the driver's MigrateSQL: idem_migrations' creation and shape, the
// records of applied versions, the lock that serialises migrators, and the words
// tools use for tables of their own.
func Migrate(t *testing.T, db func(t *testing.T) idemsql.TxDB[*sql.Tx]) {
	ctx := context.Background()
	d := db(t)
	m := d.Driver.Migrate()
	tx := inTx(ctx, d)
	exec := func(t *testing.T, field, stmt string, args ...any) {
		t.Helper()
		if err := tx(func(q idemsql.Querier) error { _, err := q.Exec(ctx, stmt, args...); return err }); err != nil {
			t.Fatalf("MigrateSQL.%s: %v", field, err)
		}
	}
	shape := func(t *testing.T, wantExists bool) {
		t.Helper()
		var exists, first bool
		err := tx(func(q idemsql.Querier) error { return q.QueryRow(ctx, m.Shape).Scan(&exists, &first) })
		if err != nil || exists != wantExists || first {
			t.Fatalf("MigrateSQL.Shape = exists %t, first shape %t, %v; want %t, false", exists, first, err, wantExists)
		}
	}
	applied := func(t *testing.T, want int) {
		t.Helper()
		got := map[string]int{}
		err := tx(func(q idemsql.Querier) error {
			rows, err := q.Query(ctx, m.Applied)
			if err != nil {
				return err
			}
			defer rows.Close()
			for rows.Next() {
				var c string
				var v int
				if err := rows.Scan(&c, &v); err != nil {
					return err
				}
				got[c] = v
			}
			return rows.Err()
		})
		if err != nil || len(got) != 1 || got["drivertest"] != want {
			t.Fatalf("MigrateSQL.Applied = %v, %v; want map[drivertest:%d]", got, err, want)
		}
	}

	shape(t, false)
	exec(t, "CreateTable", m.CreateTable)
	exec(t, "CreateTable (again: IF NOT EXISTS)", m.CreateTable)
	shape(t, true)
	if len(m.Upgrade) > 0 && m.FirstShapeApplied == "" {
		t.Error("MigrateSQL.FirstShapeApplied is empty, but Upgrade is set: a first-shape table's versions cannot be read")
	}

	exec(t, "Record", m.Record, "drivertest", 1, "001_a")
	exec(t, "Record", m.Record, "drivertest", 2, "002_b")
	applied(t, 2)
	exec(t, "Forget", m.Forget, "drivertest", 2)
	applied(t, 1)
	exec(t, "InsertIgnore", m.InsertIgnore("idem_migrations", "component, version, name", "'drivertest', 1, '001_a'"))
	applied(t, 1)

	t.Run("Lock", func(t *testing.T) {
		var unlock func(ctx context.Context, q idemsql.Querier) error
		if m.Unlock != "" { // the transaction's end does not release it
			unlock = func(ctx context.Context, q idemsql.Querier) error {
				_, err := q.Exec(ctx, m.Unlock)
				return err
			}
		}
		lockHolds(t, d, "MigrateSQL.Lock (then Unlock, if set)", func(ctx context.Context, q idemsql.Querier) (err error) {
			got := sql.NullInt64{Int64: 1}
			if m.LockReportsGot {
				err = q.QueryRow(ctx, m.Lock).Scan(&got)
			} else {
				_, err = q.Exec(ctx, m.Lock)
			}
			if err == nil && got.Int64 != 1 {
				err = fmt.Errorf("LockReportsGot, and it returned %v, not 1", got)
			}
			return err
		}, unlock)
	})

	t.Run("SplitStatements", func(t *testing.T) {
		two := "CREATE TABLE drivertest_a (id INTEGER PRIMARY KEY); CREATE TABLE drivertest_b (id INTEGER PRIMARY KEY)"
		err := tx(func(q idemsql.Querier) error { _, err := q.Exec(ctx, two); return err })
		if err != nil && !m.SplitStatements {
			t.Errorf("MigrateSQL.SplitStatements is false, but an Exec of two statements fails: %v", err)
		}
	})

	t.Run("KeyTextInsertIgnoreRandom", func(t *testing.T) {
		exec(t, "KeyText", "CREATE TABLE drivertest_keys (id "+m.KeyText+" PRIMARY KEY, other "+m.KeyText+" NOT NULL)")
		exec(t, "KeyText", "CREATE INDEX drivertest_keys_other ON drivertest_keys (other)")
		for range 2 {
			exec(t, "InsertIgnore", m.InsertIgnore("drivertest_keys", "id, other", "$1, $2"), "a", "x")
		}
		exec(t, "InsertIgnore", m.InsertIgnore("drivertest_keys", "id, other", "$1, $2"), "b", "y")
		var n int
		err := tx(func(q idemsql.Querier) error {
			rows, err := q.Query(ctx, "SELECT id FROM drivertest_keys ORDER BY "+m.Random)
			if err != nil {
				return err
			}
			defer rows.Close()
			for rows.Next() {
				n++
			}
			return rows.Err()
		})
		if err != nil || n != 2 {
			t.Fatalf("MigrateSQL.Random (ORDER BY) read %d rows, %v; want 2", n, err)
		}
	})
}
