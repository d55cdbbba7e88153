package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/inbox"
)

// The service's tables, in SQL that SQLite and Postgres both run. The ledger has
// no unique key on purpose: an order applied twice would show as two entries.
var tables = []string{
	`CREATE TABLE IF NOT EXISTS orders (id TEXT PRIMARY KEY, customer TEXT NOT NULL, amount BIGINT NOT NULL)`,
	`CREATE TABLE IF NOT EXISTS ledger (order_id TEXT NOT NULL, amount BIGINT NOT NULL)`,
	// A row per applied order; charge is set once the payment API has charged
	// it, failed if it refused to.
	`CREATE TABLE IF NOT EXISTS payments (order_id TEXT PRIMARY KEY, amount BIGINT NOT NULL, charge TEXT, failed TEXT)`,
}

func createTables(ctx context.Context, db *sql.DB) error {
	for _, stmt := range tables {
		if _, err := db.ExecContext(ctx, stmt); err != nil {
			return fmt.Errorf("create the service's tables: %w", err)
		}
	}
	return nil
}

// applyOrder is the inbox's handler: it runs in the transaction that records the
// message's key, so the ledger entry commits with it, and a redelivery of the
// message finds the key and is acknowledged without running this again. The
// charge is not made here: a call to another system inside a database transaction
// can neither be rolled back with it nor kept short; the payment worker makes it
// once this has committed.
func (a *App) applyOrder(ctx context.Context, tx *sql.Tx, m idem.Message) error {
	var ev orderEvent
	if err := json.Unmarshal(m.Payload, &ev); err != nil || ev.OrderID == "" || ev.Amount <= 0 {
		// Retrying cannot fix it: dead-letter it with its reason.
		return inbox.Permanent(fmt.Errorf(`payload: want {"order_id", "amount" > 0}: %v`, err))
	}
	if _, err := tx.ExecContext(ctx, "INSERT INTO ledger (order_id, amount) VALUES ($1, $2)", ev.OrderID, ev.Amount); err != nil {
		return err
	}
	_, err := tx.ExecContext(ctx, "INSERT INTO payments (order_id, amount) VALUES ($1, $2) ON CONFLICT (order_id) DO NOTHING", ev.OrderID, ev.Amount)
	return err
}
