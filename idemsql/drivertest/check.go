package drivertest

import (
	"context"
	"database/sql"
	"fmt"
	"testing"

	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/internal/rowscan"
	"github.com/idemhq/idem/migrate"
)

// stmtCheck runs one family's statements on a database and reports a failure
// naming the field of the statement that failed ("EffectSQL.Insert").
type stmtCheck struct {
	t      *testing.T
	db     idemsql.TxDB[*sql.Tx]
	family string
}

// runFamily opens a database from db, with the schema of sets applied, and runs
// checks, in order, on the statements get returns of its Driver: the family
// named family ("EffectSQL").
func runFamily[F any](t *testing.T, db func(t *testing.T) idemsql.TxDB[*sql.Tx], family string,
	get func(idemsql.Driver) *F, sets []migrate.Set, checks ...func(c *stmtCheck, s *F)) {
	t.Helper()
	d := db(t)
	if err := migrate.Up(context.Background(), d, sets...); err != nil {
		t.Fatalf("migrate.Up: %v", err)
	}
	s := get(d.Driver)
	if s == nil {
		t.Fatalf("the Driver's %s is nil", family)
	}
	c := &stmtCheck{t: t, db: d, family: family}
	for _, check := range checks {
		check(c, s)
	}
}

// fatalf fails the test on field's statement.
func (c *stmtCheck) fatalf(field, format string, args ...any) {
	c.t.Helper()
	c.t.Fatalf("%s.%s: %s", c.family, field, fmt.Sprintf(format, args...))
}

// exec runs field's statement stmt in a transaction of its own and returns the
// rows it affected.
func (c *stmtCheck) exec(field, stmt string, args ...any) int64 {
	c.t.Helper()
	var n int64
	err := c.db.InTx(context.Background(), func(tx *sql.Tx) (err error) {
		n, err = c.db.Querier(tx).Exec(context.Background(), stmt, args...)
		return err
	})
	if err != nil {
		c.fatalf(field, "%v\n%s", err, stmt)
	}
	return n
}

// affects runs exec and fails unless it affected want rows.
func (c *stmtCheck) affects(field string, want int64, why, stmt string, args ...any) {
	c.t.Helper()
	if n := c.exec(field, stmt, args...); n != want {
		c.fatalf(field, "%s: affected %d rows, want %d", why, n, want)
	}
}

// rows runs field's query stmt in a transaction and calls scan for each row.
func (c *stmtCheck) rows(field, stmt string, args []any, scan func(r idemsql.Rows) error) {
	c.t.Helper()
	err := c.db.InTx(context.Background(), func(tx *sql.Tx) error {
		return idemsql.EachRow(context.Background(), c.db.Querier(tx), stmt, args, scan)
	})
	if err != nil {
		c.fatalf(field, "%v\n%s", err, stmt)
	}
}

// strings runs field's query of one text column and returns its values.
func (c *stmtCheck) strings(field, stmt string, args ...any) []string {
	c.t.Helper()
	var out []string
	err := c.db.InTx(context.Background(), func(tx *sql.Tx) (err error) {
		out, err = rowscan.Strings(context.Background(), c.db.Querier(tx), stmt, args...)
		return err
	})
	if err != nil {
		c.fatalf(field, "%v\n%s", err, stmt)
	}
	return out
}

// one runs field's query, which must return one row, into dest.
func (c *stmtCheck) one(field, stmt string, args []any, dest ...any) {
	c.t.Helper()
	n := 0
	c.rows(field, stmt, args, func(r idemsql.Rows) error { n++; return r.Scan(dest...) })
	if n != 1 {
		c.fatalf(field, "returned %d rows for %v, want 1", n, args)
	}
}

// none runs field's query, which must return no row.
func (c *stmtCheck) none(field, why, stmt string, args ...any) {
	c.t.Helper()
	n := 0
	c.rows(field, stmt, args, func(idemsql.Rows) error { n++; return nil })
	if n != 0 {
		c.fatalf(field, "%s: returned %d rows, want none", why, n)
	}
}

// equal fails on field unless got equals want (compared as fmt prints them).
func (c *stmtCheck) equal(field, what string, got, want any) {
	c.t.Helper()
	if fmt.Sprint(got) != fmt.Sprint(want) {
		c.fatalf(field, "%s = %v, want %v", what, got, want)
	}
}
