package idempg

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// pipeTx is a pgx.Tx whose BEGIN is not sent on its own: it goes to the server in
// one pipeline with the transaction's first statement (QueryRow or Exec), through
// pgx's Batch.BeginTx, so a transaction that starts with a statement costs one
// round trip less. The BEGIN still runs first, so that statement and every later
// one are inside the transaction, as with a pgx.Tx from pool.Begin; from then on
// every method is pgx's own transaction's. The other methods, called first, send
// the BEGIN on its own. A transaction that runs nothing sends nothing: its Commit
// and Rollback only release the connection.
type pipeTx struct {
	c       *pgxpool.Conn    // nil once the transaction ended
	tx      pgx.Tx           // pgx's transaction on c, once BEGIN was sent
	pending pgx.BatchResults // the first statement's pipeline, until its row is read
}

var _ pgx.Tx = (*pipeTx)(nil)

// beginPipelined acquires a connection of pool for a pipeTx.
func beginPipelined(ctx context.Context, pool *pgxpool.Pool) (pgx.Tx, error) {
	c, err := pool.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	return &pipeTx{c: c}, nil
}

// settle ends a first statement's pipeline whose row was never read, so the
// connection is free for the next statement.
func (t *pipeTx) settle() {
	if t.pending != nil {
		_ = t.pending.Close()
		t.pending = nil
	}
}

// begun returns pgx's transaction, sending the BEGIN on its own if it is still
// pending.
func (t *pipeTx) begun(ctx context.Context) (pgx.Tx, error) {
	t.settle()
	switch {
	case t.tx != nil:
		return t.tx, nil
	case t.c == nil:
		return nil, pgx.ErrTxClosed
	}
	tx, err := t.c.Conn().BeginTx(ctx, pgx.TxOptions{})
	if err != nil {
		return nil, err
	}
	t.tx = tx
	return tx, nil
}

// pipeline sends BEGIN and the statement in one round trip, and returns the
// statement's results with BEGIN's already read. ok is false when the BEGIN is
// already sent: then the caller runs the statement on t.tx.
func (t *pipeTx) pipeline(ctx context.Context, sql string, args []any) (br pgx.BatchResults, ok bool, err error) {
	t.settle()
	switch {
	case t.tx != nil:
		return nil, false, nil
	case t.c == nil:
		return nil, true, pgx.ErrTxClosed
	}
	b := &pgx.Batch{}
	b.BeginTx(pgx.TxOptions{})
	b.Queue(sql, args...)
	br = t.c.SendBatch(ctx, b)
	t.tx = br.Tx()
	if _, err := br.Exec(); err != nil { // the BEGIN's result
		_ = br.Close()
		return nil, true, err
	}
	return br, true, nil
}

func (t *pipeTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	br, ok, err := t.pipeline(ctx, sql, args)
	switch {
	case !ok:
		return t.tx.QueryRow(ctx, sql, args...)
	case err != nil:
		return errRow{err}
	}
	t.pending = br
	return &pipeRow{t: t, br: br, row: br.QueryRow()}
}

// pipeRow is the first statement's row: reading it ends the pipeline.
type pipeRow struct {
	t   *pipeTx
	br  pgx.BatchResults
	row pgx.Row
}

func (r *pipeRow) Scan(dest ...any) error {
	err := r.row.Scan(dest...)
	if r.t.pending == r.br {
		r.t.pending = nil
		if cerr := r.br.Close(); cerr != nil && (err == nil || errors.Is(err, pgx.ErrNoRows)) {
			err = cerr
		}
	}
	return err
}

type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }

func (t *pipeTx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	br, ok, err := t.pipeline(ctx, sql, args)
	switch {
	case !ok:
		return t.tx.Exec(ctx, sql, args...)
	case err != nil:
		return pgconn.CommandTag{}, err
	}
	tag, err := br.Exec()
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return tag, err
}

func (t *pipeTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	tx, err := t.begun(ctx)
	if err != nil {
		return nil, err
	}
	return tx.Query(ctx, sql, args...)
}

func (t *pipeTx) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	tx, err := t.begun(ctx)
	if err != nil {
		return pgx.FailedBatchResults(b, err)
	}
	return tx.SendBatch(ctx, b)
}

func (t *pipeTx) CopyFrom(ctx context.Context, table pgx.Identifier, columns []string, src pgx.CopyFromSource) (int64, error) {
	tx, err := t.begun(ctx)
	if err != nil {
		return 0, err
	}
	return tx.CopyFrom(ctx, table, columns, src)
}

func (t *pipeTx) Prepare(ctx context.Context, name, sql string) (*pgconn.StatementDescription, error) {
	tx, err := t.begun(ctx)
	if err != nil {
		return nil, err
	}
	return tx.Prepare(ctx, name, sql)
}

// Begin starts a pseudo nested transaction (a savepoint), as pgx's does.
func (t *pipeTx) Begin(ctx context.Context) (pgx.Tx, error) {
	tx, err := t.begun(ctx)
	if err != nil {
		return nil, err
	}
	return tx.Begin(ctx)
}

// LargeObjects returns the transaction's large objects. Called before any
// statement, it sends the BEGIN first (without a context: pgx's method has none).
func (t *pipeTx) LargeObjects() pgx.LargeObjects {
	tx, err := t.begun(context.Background())
	if err != nil {
		return pgx.LargeObjects{} // the transaction is over or its connection broken
	}
	return tx.LargeObjects()
}

// Conn returns the transaction's connection. Called before any statement, it sends
// the BEGIN first (without a context), so that statements run on the connection
// are inside the transaction.
func (t *pipeTx) Conn() *pgx.Conn {
	if t.c == nil {
		return nil
	}
	c := t.c.Conn()
	_, _ = t.begun(context.Background())
	return c
}

// Commit commits the transaction, as pgx's does, and releases its connection.
func (t *pipeTx) Commit(ctx context.Context) error {
	return t.end(func(tx pgx.Tx) error { return tx.Commit(ctx) })
}

// Rollback rolls the transaction back, as pgx's does, and releases its
// connection.
func (t *pipeTx) Rollback(ctx context.Context) error {
	return t.end(func(tx pgx.Tx) error { return tx.Rollback(ctx) })
}

func (t *pipeTx) end(fn func(pgx.Tx) error) error {
	t.settle()
	if t.c == nil {
		return pgx.ErrTxClosed
	}
	var err error
	if t.tx != nil { // otherwise nothing was sent
		err = fn(t.tx)
	}
	t.c.Release() // drops the connection if it is still in a transaction
	t.c = nil
	return err
}
