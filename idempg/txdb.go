package idempg

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemhq/idem"
)

// TxDB returns the idem.TxDB of a pgx pool: how idem's transactional components
// (inbox, outbox, idemseq) begin, commit and query pgx transactions.
func TxDB(pool *pgxpool.Pool) idem.TxDB[pgx.Tx] {
	return idem.TxDB[pgx.Tx]{
		Dialect:  idem.Postgres,
		Begin:    func(ctx context.Context) (pgx.Tx, error) { return pool.Begin(ctx) },
		Commit:   func(ctx context.Context, tx pgx.Tx) error { return tx.Commit(ctx) },
		Rollback: func(ctx context.Context, tx pgx.Tx) error { return tx.Rollback(ctx) },
		Querier:  Querier,
	}
}

// Querier adapts a pgx transaction to idem.Querier.
func Querier(tx pgx.Tx) idem.Querier { return pgxQuerier{tx} }

type pgxQuerier struct{ tx pgx.Tx }

func (q pgxQuerier) QueryRow(ctx context.Context, query string, args ...any) idem.Row {
	return q.tx.QueryRow(ctx, query, args...)
}

func (q pgxQuerier) Query(ctx context.Context, query string, args ...any) (idem.Rows, error) {
	return q.tx.Query(ctx, query, args...)
}

func (q pgxQuerier) Exec(ctx context.Context, query string, args ...any) (int64, error) {
	tag, err := q.tx.Exec(ctx, query, args...)
	return tag.RowsAffected(), err
}
