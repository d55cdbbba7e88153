package idemmysql_test

import (
	"database/sql"
	"testing"

	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/idemsql/drivertest"
	"github.com/idemhq/idem/internal/sqltest"
)

// TestDriver runs the suite every driver passes, family by family.
func TestDriver(t *testing.T) {
	t.Parallel()
	db := func(t *testing.T) idemsql.TxDB[*sql.Tx] { return sqltest.MySQL(t) }
	t.Run("Outbox", func(t *testing.T) { drivertest.Outbox(t, db) })
}
