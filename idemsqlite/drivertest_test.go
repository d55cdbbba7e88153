package idemsqlite_test

import (
	"database/sql"
	"path/filepath"
	"testing"

	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/idemsql/drivertest"
	"github.com/idemhq/idem/idemsqlite"
)

// The driver suite, one line per statement family.
func TestDriverRecords(t *testing.T) { drivertest.Records(t, driverDB) }

// driverDB is a fresh file, opened as idemsqlite.Open opens one.
func driverDB(t *testing.T) idemsql.TxDB[*sql.Tx] {
	db, err := sql.Open("sqlite", idemsqlite.DSN(filepath.Join(t.TempDir(), "driver.db"), idemsqlite.Config{}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return idemsqlite.TxDB(db)
}
