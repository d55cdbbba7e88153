package idemtest

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"testing"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemsql"
)

// SQLTxEnv is the TxEnv of a database/sql backend: transactions on db, and a business
// table idemtest_effects created in db for the suite's effects. Its statements use $1
// placeholders, which PostgreSQL and SQLite both accept (and which become ? on a
// MySQL driver), so every database/sql store runs TxStoreSuite the same way:
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
	q := func(query string, args ...any) (string, []any) { return query, args }
	if strings.Contains(fmt.Sprintf("%T", db.Driver()), "mysql") {
		q = func(query string, args ...any) (string, []any) { return idemsql.Rebind(query, args) }
	}
	return TxEnv[*sql.Tx]{
		Store:    s,
		Begin:    func(ctx context.Context) (*sql.Tx, error) { return db.BeginTx(ctx, nil) },
		Commit:   func(_ context.Context, tx *sql.Tx) error { return tx.Commit() },
		Rollback: func(_ context.Context, tx *sql.Tx) error { return tx.Rollback() },
		InsertEffect: func(ctx context.Context, tx *sql.Tx, id string) error {
			query, args := q("INSERT INTO idemtest_effects (id) VALUES ($1)", id)
			_, err := tx.ExecContext(ctx, query, args...)
			return err
		},
		CountEffects: func(ctx context.Context, id string) (n int, err error) {
			query, args := q("SELECT COUNT(*) FROM idemtest_effects WHERE id = $1", id)
			err = db.QueryRowContext(ctx, query, args...).Scan(&n)
			return n, err
		},
	}
}
