package idemseq

import (
	"context"
	"database/sql"

	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/migrate"
)

// mysqlTable is a BlockSource on one row of the idem_hilo table of MySQL/MariaDB.
type mysqlTable struct {
	db    *sql.DB
	name  string
	block uint64
}

var _ BlockSource = (*mysqlTable)(nil)

const (
	// An upsert that changes nothing, rather than INSERT IGNORE, which would also
	// turn other errors into warnings.
	mysqlHiLoInsert = `INSERT INTO idem_hilo (name, next, block) VALUES (?, 1, ?) ON DUPLICATE KEY UPDATE name = name`
	mysqlHiLoBlock  = `SELECT block FROM idem_hilo WHERE name = ?`
	// MySQL has no UPDATE ... RETURNING: LAST_INSERT_ID(expr) puts the new next in
	// the statement's OK packet, read as sql.Result.LastInsertId. The bound keeps
	// next+block inside a signed 64-bit integer, where MySQL would fail with an
	// out-of-range error instead of reporting the end of the ids.
	mysqlHiLoNext = `UPDATE idem_hilo SET next = LAST_INSERT_ID(next + ?)
	WHERE name = ? AND next <= 9223372036854775807 - ?`
)

// MySQLTable returns a BlockSource on the row name of the table idem_hilo of a
// MySQL 8.0 or MariaDB 10.6+ database (go-sql-driver/mysql), creating both if they
// are missing (the table through package migrate); the row holds the first id of the
// next block and the block size. Each NextBlock is one autocommit statement that
// advances the row under its lock and reads the new value from the statement's own
// reply, so concurrent processes never get overlapping blocks, and the block is
// committed before any of its ids is handed out: a crash leaves a gap, never a reuse.
// Keep InnoDB's innodb_flush_log_at_trx_commit=1, the default, if a crash of the
// server must not roll back a block already handed out; a failover to an
// asynchronous replica can lose the last blocks in the same way.
//
// The stored block size must equal block, or the call fails with an *idem.InputError
// naming both, so every process agrees. Each NextBlock advances the row by the size
// its own process was opened with, so changing the stored size is safe at any time:
// UPDATE idem_hilo SET block = n WHERE name = 'name'. Deleting the row forgets every
// block handed out; NextBlock reports a missing row instead of starting over at 1.
//
// name is a plain identifier (letters, digits, underscore, at most 63 bytes), as for
// PostgresSequence and SQLiteTable, compared as bytes: Order_IDs and order_ids are
// two rows, as on SQLite (PostgreSQL folds names to lower case). Database failures
// are *idem.BackendError with Backend "mysql".
func MySQLTable(ctx context.Context, db *sql.DB, name string, block uint64) (BlockSource, error) {
	if err := hiloCheckOpen(db, name, block, `sql.Open("mysql", "user:password@tcp(host:3306)/db")`); err != nil {
		return nil, err
	}
	stored, err := mysqlHiLoOpen(ctx, db, name, block)
	if err != nil {
		return nil, hiloBackendErr(ctx, "mysql", "hilo.open", err)
	}
	if stored != int64(block) {
		return nil, hiloTableMismatch(name, block, stored)
	}
	return &mysqlTable{db: db, name: name, block: block}, nil
}

// mysqlHiLoOpen creates the table and the row if missing and returns the stored
// block size. The steps are idempotent; they run again if InnoDB rolls one back to
// break a deadlock between processes creating the same row.
func mysqlHiLoOpen(ctx context.Context, db *sql.DB, name string, block uint64) (stored int64, err error) {
	err = idemsql.RetrySerializationFailures(ctx, func() error {
		drv, err := idemsql.DriverFor(idemsql.MySQL)
		if err != nil {
			return err
		}
		if err := migrate.Up(ctx, idemsql.SQLDBFor(drv, db), migrate.HiLo); err != nil {
			return err
		}
		if _, err := db.ExecContext(ctx, mysqlHiLoInsert, name, int64(block)); err != nil {
			return err
		}
		return db.QueryRowContext(ctx, mysqlHiLoBlock, name).Scan(&stored)
	})
	return stored, err
}

// NextBlock is one autocommit statement: the reply that carries the block comes
// after the commit.
func (s *mysqlTable) NextBlock(ctx context.Context) (uint64, error) {
	res, err := s.db.ExecContext(ctx, mysqlHiLoNext, int64(s.block), s.name, int64(s.block))
	if err != nil {
		return 0, hiloBackendErr(ctx, "mysql", "hilo.next", err)
	}
	// The statement changes next whenever it matches the row (block > 0), so one
	// row is affected even without the driver's clientFoundRows.
	n, err := res.RowsAffected()
	if err != nil {
		return 0, hiloBackendErr(ctx, "mysql", "hilo.next", err)
	}
	if n == 0 {
		return 0, hiloNoRow(ctx, s.db, "mysql", s.name)
	}
	after, err := res.LastInsertId()
	if err != nil {
		return 0, hiloBackendErr(ctx, "mysql", "hilo.next", err)
	}
	return uint64(after) - s.block, nil
}

// BlockSize is the size this process reserves per round trip, checked against the
// stored one when opened.
func (s *mysqlTable) BlockSize() uint64 { return s.block }
