package idempg

import (
	"context"

	"github.com/idemhq/idem/idemsql"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// TxDB returns the idemsql.TxDB of a pgx pool: how idem's transactional components
// (inbox, outbox, idemseq) begin, commit and query pgx transactions.
//
// Behind a pooler in transaction mode (PgBouncer pool_mode = transaction) the pool
// must not cache statements (pgx's default) nor run in describe_exec mode: the
// first transaction of the TxDB checks, and fails with an *idem.InputError naming
// default_query_exec_mode=exec if it would (see pooler.go), so the components
// refuse at New.
func TxDB(pool *pgxpool.Pool) idemsql.TxDB[pgx.Tx] {
	chk := &poolCheck{pool: pool}
	return idemsql.TxDB[pgx.Tx]{
		Driver: Driver(),
		Begin: func(ctx context.Context) (pgx.Tx, error) {
			if err := chk.check(ctx); err != nil {
				return nil, err
			}
			return pool.Begin(ctx)
		},
		Commit:   func(ctx context.Context, tx pgx.Tx) error { return tx.Commit(ctx) },
		Rollback: func(ctx context.Context, tx pgx.Tx) error { return tx.Rollback(ctx) },
		Querier:  Querier,
		Read: func(ctx context.Context, fn func(idemsql.Querier) error) error {
			if err := chk.check(ctx); err != nil {
				return err
			}
			return fn(pgxQuerier{pool})
		},
		// BEGIN rides with the first statement: see pipeTx.
		BeginPipelined: func(ctx context.Context) (pgx.Tx, error) {
			if err := chk.check(ctx); err != nil {
				return nil, err
			}
			return beginPipelined(ctx, pool)
		},
		Handle: pool,
	}
}

// Querier adapts a pgx transaction to idemsql.Querier.
func Querier(tx pgx.Tx) idemsql.Querier { return pgxQuerier{tx} }

// pgxRunner is what a Querier needs of pgx: a transaction, or the pool for
// statements outside any transaction (idemsql.TxDB.Read).
type pgxRunner interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

type pgxQuerier struct{ tx pgxRunner }

func (q pgxQuerier) QueryRow(ctx context.Context, query string, args ...any) idemsql.Row {
	return q.tx.QueryRow(ctx, query, args...)
}

func (q pgxQuerier) Query(ctx context.Context, query string, args ...any) (idemsql.Rows, error) {
	return q.tx.Query(ctx, query, args...)
}

func (q pgxQuerier) Exec(ctx context.Context, query string, args ...any) (int64, error) {
	tag, err := q.tx.Exec(ctx, query, args...)
	return tag.RowsAffected(), err
}
