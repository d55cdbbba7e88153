package idemsqlite_test

import (
	"database/sql"
	"testing"

	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/idemsql/drivertest"
	"github.com/idemhq/idem/internal/sqltest"
)

// TestDriver runs the suite every idemsql.Driver must pass on this one, a fresh
// database per family.
func TestDriver(t *testing.T) {
	db := func(t *testing.T) idemsql.TxDB[*sql.Tx] { return sqltest.SQLite(t) }
	t.Run("Effect", func(t *testing.T) { drivertest.Effect(t, db) })
	t.Run("Saga", func(t *testing.T) { drivertest.Saga(t, db) })
}
