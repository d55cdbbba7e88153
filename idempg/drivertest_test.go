package idempg_test

import (
	"database/sql"
	"testing"

	"github.com/idemhq/idem/idempg"
	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/idemsql/drivertest"
	"github.com/idemhq/idem/internal/testsvc"
)

// freshTxDB is a TxDB on a schema of its own.
func freshTxDB(t *testing.T) idemsql.TxDB[*sql.Tx] { return idempg.SQLTxDB(testsvc.PostgresDB(t)) }

func TestDriverSeq(t *testing.T)     { t.Parallel(); drivertest.Seq(t, freshTxDB) }
func TestDriverMigrate(t *testing.T) { t.Parallel(); drivertest.Migrate(t, freshTxDB) }
