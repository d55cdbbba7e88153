package idempg_test

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
	drivertest.Run(t, func(t *testing.T) idemsql.TxDB[*sql.Tx] { return sqltest.Postgres(t) })
}
