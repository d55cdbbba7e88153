package idemmysql_test

import (
	"database/sql"
	"testing"

	"github.com/idemhq/idem/idemmysql"
	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/idemsql/drivertest"
	"github.com/idemhq/idem/internal/testsvc"
)

// The driver suite, one line per statement family.
func TestDriverRecords(t *testing.T) { drivertest.Records(t, driverDB) }

// driverDB is a fresh database.
func driverDB(t *testing.T) idemsql.TxDB[*sql.Tx] {
	dsn, err := idemmysql.DSN(testsvc.MySQLDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return idemmysql.TxDB(db)
}
