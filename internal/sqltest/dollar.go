package sqltest

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"testing"

	"github.com/go-sql-driver/mysql"

	"github.com/idemhq/idem/idemmysql"
	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/internal/testsvc"
)

// MySQLDollarDB opens a handle on a fresh MySQL/MariaDB database whose driver also
// takes $1 placeholders (rewritten to ? by idemsql.Rebind), so that a test's own SQL,
// written for PostgreSQL and SQLite, runs there unchanged. The code under test gets
// no help from it: its statements reach the driver with ? already.
func MySQLDollarDB(t testing.TB) *sql.DB {
	t.Helper()
	dsn, err := idemmysql.DSN(testsvc.MySQLDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	c, err := mysql.NewConnector(cfg)
	if err != nil {
		t.Fatal(err)
	}
	db := sql.OpenDB(dollarConnector{c})
	t.Cleanup(func() { db.Close() })
	return db
}

type dollarConnector struct{ driver.Connector }

func (d dollarConnector) Connect(ctx context.Context) (driver.Conn, error) {
	c, err := d.Connector.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return dollarConn{c}, nil
}

// dollarConn forwards to the MySQL connection, rebinding on the way.
type dollarConn struct{ driver.Conn }

func rebind(query string, args []driver.NamedValue) (string, []driver.NamedValue) {
	vals := make([]any, len(args))
	for i, a := range args {
		vals[i] = a.Value
	}
	query, vals = idemsql.Rebind(query, vals)
	out := make([]driver.NamedValue, len(vals))
	for i, v := range vals {
		out[i] = driver.NamedValue{Ordinal: i + 1, Value: v}
	}
	return query, out
}

// PrepareContext rewrites $N to ? in place: the statement's arguments come later, in
// the order given, so a test's prepared SQL must use $1, $2, … in order, once each.
// (database/sql prepares every statement with arguments: the MySQL driver answers
// ExecContext and QueryContext with driver.ErrSkip unless it interpolates.)
func (c dollarConn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	query, _ = idemsql.Rebind(query, make([]any, 1000))
	return c.Conn.(driver.ConnPrepareContext).PrepareContext(ctx, query)
}

func (c dollarConn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	query, args = rebind(query, args)
	return c.Conn.(driver.ExecerContext).ExecContext(ctx, query, args)
}

func (c dollarConn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	query, args = rebind(query, args)
	return c.Conn.(driver.QueryerContext).QueryContext(ctx, query, args)
}

func (c dollarConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	return c.Conn.(driver.ConnBeginTx).BeginTx(ctx, opts)
}

func (c dollarConn) Ping(ctx context.Context) error { return c.Conn.(driver.Pinger).Ping(ctx) }

func (c dollarConn) ResetSession(ctx context.Context) error {
	return c.Conn.(driver.SessionResetter).ResetSession(ctx)
}

func (c dollarConn) IsValid() bool { return c.Conn.(driver.Validator).IsValid() }

func (c dollarConn) CheckNamedValue(nv *driver.NamedValue) error {
	return c.Conn.(driver.NamedValueChecker).CheckNamedValue(nv)
}
