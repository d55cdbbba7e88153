package idempg

import (
	"context"
	"database/sql"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// conn is all the store's SQL needs from a database handle. A pgx pool or pgx.Tx and
// a *sql.DB or *sql.Tx each fit behind it, so both stores share one implementation.
// A missing row is reported as sql.ErrNoRows by both (pgx.ErrNoRows matches it).
type conn interface {
	exec(ctx context.Context, query string, args ...any) (rowsAffected int64, err error)
	queryRow(ctx context.Context, query string, args ...any) row
}

type row interface{ Scan(dest ...any) error }

// pgxConn runs statements on a *pgxpool.Pool, *pgx.Conn or pgx.Tx.
type pgxConn struct {
	q interface {
		Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
		QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	}
}

func (c pgxConn) exec(ctx context.Context, query string, args ...any) (int64, error) {
	tag, err := c.q.Exec(ctx, query, args...)
	return tag.RowsAffected(), err
}

func (c pgxConn) queryRow(ctx context.Context, query string, args ...any) row {
	return c.q.QueryRow(ctx, query, args...)
}

// sqlConn runs statements on a *sql.DB or *sql.Tx.
type sqlConn struct {
	q interface {
		ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
		QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
	}
}

func (c sqlConn) exec(ctx context.Context, query string, args ...any) (int64, error) {
	res, err := c.q.ExecContext(ctx, query, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

func (c sqlConn) queryRow(ctx context.Context, query string, args ...any) row {
	return c.q.QueryRowContext(ctx, query, args...)
}
