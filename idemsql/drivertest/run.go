// Package drivertest is the suite an idemsql.Driver passes: one test per
// statement family, each running the family's statements against a real database
// and failing with a message that names the statement's field. A new driver runs
// Run from a test of its package; idempg, idemsqlite and idemmysql do.
package drivertest

import (
	"database/sql"
	"testing"

	"github.com/idemhq/idem/idemsql"
)

// Run runs every family's test; db opens a fresh, empty database (or schema) of
// the driver for each test that calls it.
func Run(t *testing.T, db func(t *testing.T) idemsql.TxDB[*sql.Tx]) {
	t.Run("Outbox", func(t *testing.T) { Outbox(t, db) })
}
