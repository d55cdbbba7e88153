package idemsql

import (
	"context"
	"database/sql"
	"runtime"
	"strconv"
	"strings"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/internal/sqlitefull"
	"github.com/idemhq/idem/internal/sqlitegate"
)

// Dialect is the SQL a transactional component speaks.
type Dialect int

const (
	// Postgres: PostgreSQL, through pgx or database/sql.
	Postgres Dialect = iota + 1
	// SQLite: SQLite through modernc.org/sqlite.
	SQLite
	// MySQL: MySQL 8.0 or MariaDB 10.6 and later, through github.com/go-sql-driver/mysql.
	// Its Querier rewrites the $1 placeholders of idem's statements to ?.
	MySQL
)

// String returns "postgres" or "sqlite", the backend label of errors and metrics.
func (d Dialect) String() string {
	switch d {
	case Postgres:
		return "postgres"
	case SQLite:
		return "sqlite"
	case MySQL:
		return "mysql"
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
	// Driver holds the statements idem runs on its own tables in this database.
	Driver   Driver
	Begin    func(ctx context.Context) (Tx, error)
	Commit   func(ctx context.Context, tx Tx) error
	Rollback func(ctx context.Context, tx Tx) error
	Querier  func(tx Tx) Querier
	// BeginReadCommitted, where set, begins a READ COMMITTED transaction. The outbox
	// relay on MySQL needs one: under InnoDB's default REPEATABLE READ its locking
	// reads would lock gaps and hold producers' inserts back while it publishes.
	// SQLDB sets it for MySQL.
	BeginReadCommitted func(ctx context.Context) (Tx, error)
	// Read, where set, runs fn with a Querier outside any transaction, each of its
	// statements committing on its own (autocommit): for reads that need no lock (on
	// SQLite, whose transactions from idemsqlite's handle take the write lock at
	// BEGIN, a constructor checks the schema this way without queuing behind the
	// writers), and, through Auto, for a write that is one statement. SQLDB and
	// idempg.TxDB set it.
	Read func(ctx context.Context, fn func(Querier) error) error
	// BeginPipelined, where set, begins a transaction whose BEGIN is sent to the
	// server together with its first statement, in one round trip, instead of on
	// its own: a short transaction that starts with a statement (the inbox's
	// recording of a message key) costs one round trip less. The BEGIN still runs
	// first, so that statement is inside the transaction. idempg.TxDB sets it. A
	// TxDB whose Begin is replaced (to wrap it) should replace or clear this too.
	BeginPipelined func(ctx context.Context) (Tx, error)
	// Handle is the handle the transactions are begun on (the *sql.DB, the
	// *pgxpool.Pool), for identity only: a component given two TxDBs with one
	// Handle knows they reach one database (package queue's Source retires a
	// message in the inbox's own transaction then). SQLDB and idempg.TxDB set it;
	// nil means unknown, never the same as another.
	Handle any
}

// SameHandle reports whether d and o begin their transactions on one known
// handle, and so reach one database.
func (d TxDB[Tx]) SameHandle(o TxDB[Tx]) bool { return d.Handle != nil && d.Handle == o.Handle }

// Dialect is the dialect of d's Driver, or 0 where it has none.
func (d TxDB[Tx]) Dialect() Dialect {
	if d.Driver == nil {
		return 0
	}
	return d.Driver.Dialect()
}

// Auto runs fn's statements each in its own transaction (Read) where d can, and
// all in one transaction otherwise: for a write that is a single statement, one
// round trip instead of BEGIN, the statement and COMMIT.
func (d TxDB[Tx]) Auto(ctx context.Context, fn func(Querier) error) error {
	if d.Read == nil {
		return d.InTx(ctx, func(tx Tx) error { return fn(d.Querier(tx)) })
	}
	return d.Read(ctx, fn)
}

// Validate reports a TxDB with a missing field as an *idem.InputError.
func (d TxDB[Tx]) Validate() error {
	switch {
	case d.Driver == nil:
		return &idem.InputError{Field: "TxDB.Driver", Reason: "is not set", Fix: "build the TxDB with idemsql.SQLDB or a driver's constructor (idempg.TxDB, idemsqlite.TxDB, idemmysql.TxDB), which set it"}
	case d.Begin == nil || d.Commit == nil || d.Rollback == nil || d.Querier == nil:
		return &idem.InputError{Field: "TxDB", Reason: "has a nil function", Fix: "build it with idemsql.SQLDB or a driver's constructor"}
	}
	return nil
}

// InTx runs fn in a transaction of d and commits it, or rolls it back if fn fails.
func (d TxDB[Tx]) InTx(ctx context.Context, fn func(tx Tx) error) error {
	return d.inTx(ctx, d.Begin, fn)
}

// InTxPipelined is InTx with BeginPipelined where it is set: the transaction's
// BEGIN goes to the server with fn's first statement.
func (d TxDB[Tx]) InTxPipelined(ctx context.Context, fn func(tx Tx) error) error {
	if d.BeginPipelined == nil {
		return d.InTx(ctx, fn)
	}
	return d.inTx(ctx, d.BeginPipelined, fn)
}

// InTxReadCommitted is InTx in a READ COMMITTED transaction where BeginReadCommitted
// is set, and InTx where it is not.
func (d TxDB[Tx]) InTxReadCommitted(ctx context.Context, fn func(tx Tx) error) error {
	if d.BeginReadCommitted == nil {
		return d.InTx(ctx, fn)
	}
	return d.inTx(ctx, d.BeginReadCommitted, fn)
}

func (d TxDB[Tx]) inTx(ctx context.Context, begin func(context.Context) (Tx, error), fn func(tx Tx) error) error {
	tx, err := begin(ctx)
	if err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		_ = d.Rollback(context.WithoutCancel(ctx), tx)
		return err
	}
	return d.Commit(ctx, tx)
}

// SQLDB returns the TxDB of a database/sql handle to PostgreSQL (pgx's stdlib driver),
// SQLite (modernc.org/sqlite) or MySQL/MariaDB (go-sql-driver/mysql). The dialect is
// asked of the database itself, and its Driver is the one registered for it (import
// idempg, idemsqlite or idemmysql).
func SQLDB(ctx context.Context, db *sql.DB) (TxDB[*sql.Tx], error) {
	if db == nil {
		return TxDB[*sql.Tx]{}, &idem.InputError{Field: "db", Reason: "is nil", Fix: "pass an open *sql.DB"}
	}
	d := Postgres
	var v string
	if err := db.QueryRowContext(ctx, "SELECT sqlite_version()").Scan(&v); err == nil {
		d = SQLite
	} else if err := db.QueryRowContext(ctx, "SELECT @@version_comment").Scan(&v); err == nil {
		d = MySQL
	} else if err := db.PingContext(ctx); err != nil {
		return TxDB[*sql.Tx]{}, &idem.BackendError{Backend: "sql", Op: "open", Err: err}
	}
	drv, err := DriverFor(d)
	if err != nil {
		return TxDB[*sql.Tx]{}, err
	}
	return SQLDBFor(drv, db), nil
}

// SQLDBFor returns the TxDB of a database/sql handle to the database of drv,
// without asking the database. The driver packages' constructors call it.
func SQLDBFor(drv Driver, db *sql.DB) TxDB[*sql.Tx] {
	d := drv.Dialect()
	t := TxDB[*sql.Tx]{
		Driver:   drv,
		Begin:    func(ctx context.Context) (*sql.Tx, error) { return db.BeginTx(ctx, nil) },
		Commit:   func(_ context.Context, tx *sql.Tx) error { return tx.Commit() },
		Rollback: func(_ context.Context, tx *sql.Tx) error { return tx.Rollback() },
		Querier:  querierFor(d),
		Handle:   db,
	}
	var direct Querier = sqlQuerier{db}
	if d == SQLite {
		// Writers queue for BEGIN in the process instead of polling SQLite's lock
		// against each other (internal/sqlitegate); a full disk
		// (SQLITE_FULL) at Begin, a statement or Commit is said in idem's words and
		// matches idemsqlite.ErrDiskFull.
		gate := sqlitegate.For(db)
		t.Begin = func(ctx context.Context) (*sql.Tx, error) {
			tx, err := gate.Begin(ctx, db, nil)
			return tx, sqlitefull.Tx(err)
		}
		t.Commit = func(_ context.Context, tx *sql.Tx) error { return sqlitefull.Tx(tx.Commit()) }
		t.Querier = func(tx *sql.Tx) Querier { return sqliteQuerier{sqlQuerier{tx}} }
		direct = sqliteQuerier{sqlQuerier{db}}
	}
	if d == MySQL {
		t.BeginReadCommitted = func(ctx context.Context) (*sql.Tx, error) {
			return db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
		}
		direct = mysqlQuerier{sqlQuerier{db}}
	}
	t.Read = func(_ context.Context, fn func(Querier) error) error { return fn(direct) }
	return t
}

func querierFor(d Dialect) func(*sql.Tx) Querier {
	if d == MySQL {
		return func(tx *sql.Tx) Querier { return mysqlQuerier{sqlQuerier{tx}} }
	}
	return SQLQuerier
}

// SQLQuerier adapts a database/sql transaction to Querier.
func SQLQuerier(tx *sql.Tx) Querier { return sqlQuerier{tx} }

// sqlRunner is what a Querier needs of database/sql: a *sql.Tx, or a *sql.DB for
// statements outside any transaction.
type sqlRunner interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

type sqlQuerier struct{ tx sqlRunner }

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
	return rowsAffected(r)
}

// rowsAffected is r.RowsAffected(), and 0 where the driver gave database/sql no
// result at all: modernc.org/sqlite answers a text with no statement in it (a
// migration of comments only) with a nil driver.Result, which sql.Result wraps
// and then dereferences.
func rowsAffected(r sql.Result) (n int64, err error) {
	defer func() {
		if p := recover(); p != nil {
			if re, ok := p.(runtime.Error); !ok || !strings.Contains(re.Error(), "nil pointer dereference") {
				panic(p) // not the missing result: not ours to hide
			}
			n, err = 0, nil
		}
	}()
	return r.RowsAffected()
}

type sqlRows struct{ *sql.Rows }

func (r sqlRows) Close() { _ = r.Rows.Close() }

// sqliteQuerier is sqlQuerier with SQLite's full disk explained (sqlitefull.Tx).
type sqliteQuerier struct{ q sqlQuerier }

func (s sqliteQuerier) QueryRow(ctx context.Context, query string, args ...any) Row {
	return sqliteRow{s.q.QueryRow(ctx, query, args...)}
}

func (s sqliteQuerier) Query(ctx context.Context, query string, args ...any) (Rows, error) {
	rows, err := s.q.Query(ctx, query, args...)
	if err != nil {
		return nil, sqlitefull.Tx(err)
	}
	return sqliteRows{rows}, nil
}

func (s sqliteQuerier) Exec(ctx context.Context, query string, args ...any) (int64, error) {
	n, err := s.q.Exec(ctx, query, args...)
	return n, sqlitefull.Tx(err)
}

type sqliteRow struct{ Row }

func (r sqliteRow) Scan(dest ...any) error { return sqlitefull.Tx(r.Row.Scan(dest...)) }

type sqliteRows struct{ Rows }

func (r sqliteRows) Err() error { return sqlitefull.Tx(r.Rows.Err()) }

// mysqlQuerier runs idem's statements, written with $1 placeholders, on MySQL, whose
// driver takes ? in the order of the arguments.
type mysqlQuerier struct{ q sqlQuerier }

func (m mysqlQuerier) QueryRow(ctx context.Context, query string, args ...any) Row {
	query, args = Rebind(query, args)
	return m.q.QueryRow(ctx, query, args...)
}

func (m mysqlQuerier) Query(ctx context.Context, query string, args ...any) (Rows, error) {
	query, args = Rebind(query, args)
	return m.q.Query(ctx, query, args...)
}

func (m mysqlQuerier) Exec(ctx context.Context, query string, args ...any) (int64, error) {
	query, args = Rebind(query, args)
	return m.q.Exec(ctx, query, args...)
}

// Rebind rewrites the $N placeholders of query (outside quoted strings and
// identifiers) to ?, and returns the arguments in the order the ? take them: $2, $1,
// $2 becomes ?, ?, ? with args[1], args[0], args[1]. A query without $ is returned as
// it is.
func Rebind(query string, args []any) (string, []any) {
	if !strings.Contains(query, "$") {
		return query, args
	}
	var b strings.Builder
	out := make([]any, 0, len(args))
	var quote byte
	for i := 0; i < len(query); i++ {
		c := query[i]
		switch {
		case quote != 0:
			if c == quote {
				quote = 0
			}
		case c == '\'' || c == '"' || c == '`':
			quote = c
		case c == '$' && i+1 < len(query) && query[i+1] >= '0' && query[i+1] <= '9':
			j := i + 1
			for j < len(query) && query[j] >= '0' && query[j] <= '9' {
				j++
			}
			n, err := strconv.Atoi(query[i+1 : j])
			if err == nil && n >= 1 && n <= len(args) {
				b.WriteByte('?')
				out = append(out, args[n-1])
				i = j - 1
				continue
			}
		}
		b.WriteByte(c)
	}
	return b.String(), out
}
