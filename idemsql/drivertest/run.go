// Package drivertest is the suite an idemsql.Driver must pass: one exported test
// per statement family, each running the family's statements against a real
// database and failing with a message that names the statement's field. A new
// driver runs Run from a test of its package, with a function that opens a
// fresh, empty database of its kind for each call; the suite applies the
// migrations it needs:
//
//	func TestDriver(t *testing.T) { drivertest.Run(t, openTestDB) }
package drivertest

import (
	"database/sql"
	"testing"

	"github.com/idemhq/idem/idemsql"
)

// Run checks every statement family of db's Driver, one subtest per family.
func Run(t *testing.T, db func(t *testing.T) idemsql.TxDB[*sql.Tx]) {
	t.Run("Records", func(t *testing.T) { Records(t, db) })
	t.Run("Outbox", func(t *testing.T) { Outbox(t, db) })
	t.Run("Inbox", func(t *testing.T) { Inbox(t, db) })
	t.Run("Stream", func(t *testing.T) { Stream(t, db) })
	t.Run("Effect", func(t *testing.T) { Effect(t, db) })
	t.Run("Saga", func(t *testing.T) { Saga(t, db) })
	t.Run("Seq", func(t *testing.T) { Seq(t, db) })
	t.Run("Queue", func(t *testing.T) { Queue(t, db) })
	t.Run("Migrate", func(t *testing.T) { Migrate(t, db) })
}
