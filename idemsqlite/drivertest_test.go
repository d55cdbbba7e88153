package idemsqlite_test

import (
	"database/sql"
	"path/filepath"
	"testing"

	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/idemsql/drivertest"
	"github.com/idemhq/idem/idemsqlite"
)

// freshTxDB is a TxDB on a file of its own, whose writers wait for each other.
func freshTxDB(t *testing.T) idemsql.TxDB[*sql.Tx] {
	db, err := sql.Open("sqlite", "file:"+filepath.Join(t.TempDir(), "driver.db")+"?_pragma=journal_mode(WAL)&_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return idemsqlite.TxDB(db)
}

func TestDriverSeq(t *testing.T)     { t.Parallel(); drivertest.Seq(t, freshTxDB) }
func TestDriverMigrate(t *testing.T) { t.Parallel(); drivertest.Migrate(t, freshTxDB) }
