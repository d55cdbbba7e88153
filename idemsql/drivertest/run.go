// Package drivertest is the suite an idemsql.Driver must pass: one exported test
// per statement family, each of which runs the family's statements on a real
// database and fails with a message that names the statement's field. A driver
// package runs it from a test, with a function that opens a fresh, empty database
// of its kind for each (sub)test:
//
//	func TestDriver(t *testing.T) { drivertest.Run(t, openTestDB) }
package drivertest

import (
	"database/sql"
	"testing"

	"github.com/idemhq/idem/idemsql"
)

// Run runs every family's test on databases from db.
func Run(t *testing.T, db func(t *testing.T) idemsql.TxDB[*sql.Tx]) {
	t.Run("Effect", func(t *testing.T) { Effect(t, db) })
	t.Run("Saga", func(t *testing.T) { Saga(t, db) })
}
