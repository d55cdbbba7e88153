package idempg_test

import (
	"database/sql"
	"testing"

	"github.com/idemhq/idem/idempg"
	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/idemsql/drivertest"
	"github.com/idemhq/idem/internal/sqltest"
	"github.com/idemhq/idem/internal/testsvc"
	"github.com/jackc/pgx/v5"
)

// TestDriver runs the suite every idemsql.Driver must pass on this one, a fresh
// database per family.
func TestDriver(t *testing.T) {
	drivertest.Run(t, func(t *testing.T) idemsql.TxDB[*sql.Tx] { return sqltest.Postgres(t) })
}

// TestDriverPgx runs the families a pgx store runs (its records) over pgx.
func TestDriverPgx(t *testing.T) {
	drivertest.Records(t, func(t *testing.T) idemsql.TxDB[pgx.Tx] { return idempg.TxDB(testsvc.PostgresPool(t)) })
}
