package idemsqlite_test

import (
	"database/sql"
	"path/filepath"
	"testing"

	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/idemsql/drivertest"
	"github.com/idemhq/idem/idemsqlite"
)

// TestDriver runs the suite every idemsql.Driver must pass on this one, a fresh
// database file per family, opened as idemsqlite opens its own (WAL, BEGIN
// IMMEDIATE: a transaction holds the write lock from its start).
func TestDriver(t *testing.T) {
	drivertest.Run(t, func(t *testing.T) idemsql.TxDB[*sql.Tx] {
		db, err := sql.Open("sqlite", idemsqlite.DSN(filepath.Join(t.TempDir(), "driver.db"), idemsqlite.Config{}))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		return idemsqlite.TxDB(db)
	})
}
