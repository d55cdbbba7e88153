// Package drivertest is the suite a driver of package idemsql must pass: one test per
// statement family, each running the family's statements on a real database and
// naming the field whose statement is wrong. A new database's driver package runs
// Run (or each family's test) against a fresh database per call of db.
package drivertest

import (
	"context"
	"database/sql"
	"testing"

	"github.com/idemhq/idem/idemsql"
)

// Run runs every family's test. db returns a TxDB on a fresh, empty database (or
// schema) each time it is called.
func Run(t *testing.T, db func(t *testing.T) idemsql.TxDB[*sql.Tx]) {
	t.Run("Seq", func(t *testing.T) { Seq(t, db) })
	t.Run("Migrate", func(t *testing.T) { Migrate(t, db) })
}

// inTx returns a function that runs fn in a transaction of d of its own.
func inTx(ctx context.Context, d idemsql.TxDB[*sql.Tx]) func(fn func(q idemsql.Querier) error) error {
	return func(fn func(q idemsql.Querier) error) error {
		return d.InTx(ctx, func(tx *sql.Tx) error { return fn(d.Querier(tx)) })
	}
}
