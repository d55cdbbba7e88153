package idemsqlite_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"

	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/idemsql/drivertest"
	"github.com/idemhq/idem/idemsqlite"
)

// driverDB opens a new database file for the driver's suite.
func driverDB(t *testing.T) idemsql.TxDB[*sql.Tx] {
	s, err := idemsqlite.Open(context.Background(), filepath.Join(t.TempDir(), "driver.db"), idemsqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return idemsqlite.TxDB(s.DB())
}

func TestDriverInbox(t *testing.T)  { drivertest.Inbox(t, driverDB) }
func TestDriverStream(t *testing.T) { drivertest.Stream(t, driverDB) }
