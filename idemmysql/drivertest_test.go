package idemmysql_test

import (
	"database/sql"
	"testing"

	"github.com/idemhq/idem/idemmysql"
	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/idemsql/drivertest"
	"github.com/idemhq/idem/internal/testsvc"
)

// driverDB opens a fresh database for the driver's suite.
func driverDB(t *testing.T) idemsql.TxDB[*sql.Tx] { return idemmysql.TxDB(testsvc.MySQLDB(t)) }

func TestDriverInbox(t *testing.T)  { drivertest.Inbox(t, driverDB) }
func TestDriverStream(t *testing.T) { drivertest.Stream(t, driverDB) }
