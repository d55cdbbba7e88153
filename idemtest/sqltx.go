package idemtest

import (
	"context"
	"database/sql"
	"testing"

	"github.com/idemhq/idem"
)

// SQLTxEnv is the TxEnv of a database/sql backend: transactions on db, and a business
// table idemtest_effects created in db for the suite's effects. Its statements use $1
// placeholders, which PostgreSQL and SQLite both accept, so every database/sql store
// runs TxStoreSuite the same way:
//
//	idemtest.TxStoreSuite(t, func(t *testing.T) idemtest.TxEnv[*sql.Tx] {
//		store, db := newStore(t)
//		return idemtest.SQLTxEnv(t, db, store)
//	})
func SQLTxEnv(t *testing.T, db *sql.DB, s idem.TxStore[*sql.Tx]) TxEnv[*sql.Tx] {
	t.Helper()
	if _, err := db.ExecContext(ctxFor(t), "CREATE TABLE idemtest_effects (id TEXT NOT NULL)"); err != nil {
		t.Fatalf("create the business table: %v", err)
	}
	return TxEnv[*sql.Tx]{
		Store:    s,
		Begin:    func(ctx context.Context) (*sql.Tx, error) { return db.BeginTx(ctx, nil) },
		Commit:   func(_ context.Context, tx *sql.Tx) error { return tx.Commit() },
		Rollback: func(_ context.Context, tx *sql.Tx) error { return tx.Rollback() },
		InsertEffect: func(ctx context.Context, tx *sql.Tx, id string) error {
			_, err := tx.ExecContext(ctx, "INSERT INTO idemtest_effects (id) VALUES ($1)", id)
			return err
		},
		CountEffects: func(ctx context.Context, id string) (n int, err error) {
			err = db.QueryRowContext(ctx, "SELECT COUNT(*) FROM idemtest_effects WHERE id = $1", id).Scan(&n)
			return n, err
		},
	}
}
