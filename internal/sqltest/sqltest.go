// Package sqltest runs a test on each SQL database idem's transactional
// components support: SQLite (a file in the test's temporary directory) and
// PostgreSQL (a fresh schema), through database/sql.
package sqltest

import (
	// Every driver, so SQLDB finds the one of each database these helpers open.
	"context"
	"database/sql"
	"path/filepath"
	"testing"

	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemmysql"
	"github.com/idemhq/idem/idempg"
	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/idemsqlite"
	"github.com/idemhq/idem/internal/testsvc"
)

// ForEachDB runs fn as parallel subtests "sqlite" and "postgres", each on a
// database of its own. Postgres skips (or, with IDEM_REQUIRE_SERVICES=1, fails)
// when the server is down.
func ForEachDB(t *testing.T, fn func(t *testing.T, db idemsql.TxDB[*sql.Tx])) {
	t.Run("sqlite", func(t *testing.T) {
		t.Parallel()
		fn(t, SQLite(t))
	})
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		fn(t, Postgres(t))
	})
}

// ForEachDialect runs fn as ForEachDB does, and as a third parallel subtest "mysql"
// on a MySQL/MariaDB database of its own: for the components that speak MySQL.
func ForEachDialect(t *testing.T, fn func(t *testing.T, db idemsql.TxDB[*sql.Tx])) {
	ForEachDB(t, fn)
	t.Run("mysql", func(t *testing.T) {
		t.Parallel()
		fn(t, MySQL(t))
	})
}

// SQLite opens a new SQLite database, closed when t ends.
func SQLite(t testing.TB) idemsql.TxDB[*sql.Tx] {
	t.Helper()
	s, err := idemsqlite.Open(context.Background(), filepath.Join(t.TempDir(), "test.db"), idemsqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return txdb(t, s.DB())
}

// MySQL opens a fresh MySQL/MariaDB database, dropped when t ends.
func MySQL(t testing.TB) idemsql.TxDB[*sql.Tx] {
	t.Helper()
	return idemmysql.TxDB(testsvc.MySQLDB(t))
}

// Postgres opens a fresh schema of the test database, dropped when t ends.
func Postgres(t testing.TB) idemsql.TxDB[*sql.Tx] {
	t.Helper()
	return txdb(t, testsvc.PostgresDB(t))
}

func txdb(t testing.TB, db *sql.DB) idemsql.TxDB[*sql.Tx] {
	t.Helper()
	d, err := idemsql.SQLDB(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// Database is one database of a test on one of the three kinds: its handle,
// taking $1 placeholders on every kind (MySQL's through MySQLDollarDB), its
// TxDB, and the key store of its kind in it.
type Database struct {
	Kind  string // sqlite, postgres or mysql
	DB    *sql.DB
	Tx    idemsql.TxDB[*sql.Tx]
	Store idem.TxStore[*sql.Tx]
}

// Open opens a fresh database of kind (sqlite, postgres or mysql), closed or
// dropped when t ends.
func Open(t testing.TB, kind string) *Database {
	t.Helper()
	ctx := context.Background()
	d := &Database{Kind: kind}
	var err error
	switch kind {
	case "sqlite":
		s, err := idemsqlite.Open(ctx, filepath.Join(t.TempDir(), "test.db"), idemsqlite.Config{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		d.DB, d.Store = s.DB(), s
	case "postgres":
		d.DB = testsvc.PostgresDB(t)
		d.Store, err = idempg.NewSQL(ctx, d.DB, idempg.Config{})
	case "mysql":
		d.DB = MySQLDollarDB(t)
		d.Store, err = idemmysql.New(ctx, d.DB, idemmysql.Config{})
	default:
		t.Fatalf("no database %q", kind)
	}
	if err != nil {
		t.Fatal(err)
	}
	d.Tx = txdb(t, d.DB)
	return d
}
