package idem

import (
	"context"
	"database/sql"
)

// Dialect is the SQL a transactional component speaks.
type Dialect int

const (
	// Postgres: PostgreSQL, through pgx or database/sql.
	Postgres Dialect = iota + 1
	// SQLite: SQLite through modernc.org/sqlite.
	SQLite
)

// String returns "postgres" or "sqlite", the backend label of errors and metrics.
func (d Dialect) String() string {
	switch d {
	case Postgres:
		return "postgres"
	case SQLite:
		return "sqlite"
	}
	return "unknown"
}

// Row is one result row (*sql.Row, pgx.Row).
type Row interface{ Scan(dest ...any) error }

// Rows is a result set being read.
type Rows interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
	Close()
}

// Querier runs statements inside one transaction. It is the whole surface idem's
// transactional components (inbox, outbox, idemseq, effect) need from a driver; the
// statements use $1 placeholders, which PostgreSQL and SQLite both accept.
type Querier interface {
	QueryRow(ctx context.Context, query string, args ...any) Row
	Query(ctx context.Context, query string, args ...any) (Rows, error)
	// Exec runs a statement and returns the number of rows it affected.
	Exec(ctx context.Context, query string, args ...any) (int64, error)
}

// TxDB tells a transactional component how to run transactions on a driver whose
// transaction type is Tx, so one implementation serves pgx.Tx and *sql.Tx. Build it
// with SQLDB for database/sql, or idempg.TxDB for a pgx pool.
type TxDB[Tx any] struct {
	Dialect  Dialect
	Begin    func(ctx context.Context) (Tx, error)
	Commit   func(ctx context.Context, tx Tx) error
	Rollback func(ctx context.Context, tx Tx) error
	Querier  func(tx Tx) Querier
}

// Validate reports a TxDB with a missing field as an *InputError.
func (d TxDB[Tx]) Validate() error {
	switch {
	case d.Dialect != Postgres && d.Dialect != SQLite:
		return &InputError{Field: "TxDB.Dialect", Reason: "is not set", Fix: "use idem.SQLDB or idempg.TxDB, which set it"}
	case d.Begin == nil || d.Commit == nil || d.Rollback == nil || d.Querier == nil:
		return &InputError{Field: "TxDB", Reason: "has a nil function", Fix: "build it with idem.SQLDB or idempg.TxDB"}
	}
	return nil
}

// InTx runs fn in a transaction of d and commits it, or rolls it back if fn fails.
func (d TxDB[Tx]) InTx(ctx context.Context, fn func(tx Tx) error) error {
	tx, err := d.Begin(ctx)
	if err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		_ = d.Rollback(context.WithoutCancel(ctx), tx)
		return err
	}
	return d.Commit(ctx, tx)
}

// SQLDB returns the TxDB of a database/sql handle to PostgreSQL (pgx's stdlib driver)
// or SQLite (modernc.org/sqlite). The dialect is asked of the database itself.
func SQLDB(ctx context.Context, db *sql.DB) (TxDB[*sql.Tx], error) {
	if db == nil {
		return TxDB[*sql.Tx]{}, &InputError{Field: "db", Reason: "is nil", Fix: "pass an open *sql.DB"}
	}
	d := Postgres
	var v string
	if err := db.QueryRowContext(ctx, "SELECT sqlite_version()").Scan(&v); err == nil {
		d = SQLite
	} else if err := db.PingContext(ctx); err != nil {
		return TxDB[*sql.Tx]{}, &BackendError{Backend: "sql", Op: "open", Err: err}
	}
	return SQLDBFor(d, db), nil
}

// SQLDBFor returns the TxDB of a database/sql handle whose dialect the caller knows,
// without asking the database.
func SQLDBFor(d Dialect, db *sql.DB) TxDB[*sql.Tx] {
	return TxDB[*sql.Tx]{
		Dialect:  d,
		Begin:    func(ctx context.Context) (*sql.Tx, error) { return db.BeginTx(ctx, nil) },
		Commit:   func(_ context.Context, tx *sql.Tx) error { return tx.Commit() },
		Rollback: func(_ context.Context, tx *sql.Tx) error { return tx.Rollback() },
		Querier:  SQLQuerier,
	}
}

// SQLQuerier adapts a database/sql transaction to Querier.
func SQLQuerier(tx *sql.Tx) Querier { return sqlQuerier{tx} }

type sqlQuerier struct{ tx *sql.Tx }

func (q sqlQuerier) QueryRow(ctx context.Context, query string, args ...any) Row {
	return q.tx.QueryRowContext(ctx, query, args...)
}

func (q sqlQuerier) Query(ctx context.Context, query string, args ...any) (Rows, error) {
	rows, err := q.tx.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	return sqlRows{rows}, nil
}

func (q sqlQuerier) Exec(ctx context.Context, query string, args ...any) (int64, error) {
	r, err := q.tx.ExecContext(ctx, query, args...)
	if err != nil {
		return 0, err
	}
	return r.RowsAffected()
}

type sqlRows struct{ *sql.Rows }

func (r sqlRows) Close() { _ = r.Rows.Close() }
