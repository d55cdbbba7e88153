package idempg_test

import (
	"database/sql"
	"testing"

	"github.com/idemhq/idem/idempg"
	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/idemsql/drivertest"
	"github.com/idemhq/idem/internal/testsvc"
)

// driverDB opens a fresh schema of the test database for the driver's suite.
func driverDB(t *testing.T) idemsql.TxDB[*sql.Tx] { return idempg.SQLTxDB(testsvc.PostgresDB(t)) }

func TestDriverInbox(t *testing.T)  { drivertest.Inbox(t, driverDB) }
func TestDriverStream(t *testing.T) { drivertest.Stream(t, driverDB) }
