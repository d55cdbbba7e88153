// Package drivertest is the suite an idemsql.Driver must pass: one exported test
// per statement family, each running the family's statements against a real
// database and failing with a message that names the statement's field. A new
// database learns from it everything it owes idem; its driver package runs Run (or
// the families one by one) in a test.
package drivertest

import (
	"database/sql"
	"testing"

	"github.com/idemhq/idem/idemsql"
)

// Run runs every family's test. db returns a handle to an empty database (a fresh
// schema, database or file) each time it is called.
func Run(t *testing.T, db func(t *testing.T) idemsql.TxDB[*sql.Tx]) {
	t.Run("Records", func(t *testing.T) { Records(t, db) })
}
