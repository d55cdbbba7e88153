package idempg_test

import (
	"database/sql"
	"testing"

	"github.com/idemhq/idem/idempg"
	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/idemsql/drivertest"
	"github.com/idemhq/idem/internal/testsvc"
	"github.com/jackc/pgx/v5"
)

// The driver suite, one line per statement family, on database/sql (the TxDB
// idemsql.SQLDB finds) and, for the families a pgx store runs, on pgx.
func TestDriverRecords(t *testing.T)    { drivertest.Records(t, driverDB) }
func TestDriverRecordsPgx(t *testing.T) { drivertest.Records(t, driverPgx) }

// driverDB is database/sql on a fresh schema.
func driverDB(t *testing.T) idemsql.TxDB[*sql.Tx] { return idempg.SQLTxDB(openDB(t)) }

// driverPgx is a pgx pool on a fresh schema.
func driverPgx(t *testing.T) idemsql.TxDB[pgx.Tx] { return idempg.TxDB(testsvc.PostgresPool(t)) }
