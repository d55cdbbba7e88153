package idemmysql

import (
	"context"
	"database/sql"

	"github.com/idemhq/idem/idemseq"
	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/migrate"
)

// HiLoTable returns an idemseq.BlockSource on the row name of the table idem_hilo of
// a MySQL 8.0 or MariaDB 10.6+ database (go-sql-driver/mysql), creating both if they
// are missing (the table through package migrate); the row holds the first id of the
// next block and the block size. Each NextBlock is one autocommit statement that
// advances the row under its lock and reads the new value from the statement's own
// reply, so concurrent processes never get overlapping blocks, and the block is
// committed before any of its ids is handed out: a crash leaves a gap, never a reuse.
// Keep InnoDB's innodb_flush_log_at_trx_commit=1, the default, if a crash of the
// server must not roll back a block already handed out; a failover to an
// asynchronous replica can lose the last blocks in the same way.
//
// The stored block size must equal block (see idemseq.TableSource for changing it).
// name is a plain identifier (letters, digits, underscore, at most 63 bytes), as for
// idempg.HiLoSequence and idemsqlite.HiLoTable, compared as bytes: Order_IDs and
// order_ids are two rows, as on SQLite (PostgreSQL folds names to lower case).
// Database failures are *idem.BackendError with Backend "mysql".
func HiLoTable(ctx context.Context, db *sql.DB, name string, block uint64) (idemseq.BlockSource, error) {
	if err := idemseq.CheckSourceArgs(db, name, block, `sql.Open("mysql", "user:password@tcp(host:3306)/db")`); err != nil {
		return nil, err
	}
	return idemseq.TableSource(ctx, hiloRows{db}, name, block)
}

// hiloRows is idem_hilo in a MySQL/MariaDB database.
type hiloRows struct{ db *sql.DB }

const (
	// An upsert that changes nothing, rather than INSERT IGNORE, which would also
	// turn other errors into warnings.
	hiloInsert = `INSERT INTO idem_hilo (name, next, block) VALUES (?, 1, ?) ON DUPLICATE KEY UPDATE name = name`
	hiloBlock  = `SELECT block FROM idem_hilo WHERE name = ?`
	hiloNext   = `SELECT next FROM idem_hilo WHERE name = ?`
	// MySQL has no UPDATE ... RETURNING: LAST_INSERT_ID(expr) puts the new next in
	// the statement's OK packet, read as sql.Result.LastInsertId. The bound keeps
	// next+block inside a signed 64-bit integer, where MySQL would fail with an
	// out-of-range error instead of reporting the end of the ids.
	hiloReserve = `UPDATE idem_hilo SET next = LAST_INSERT_ID(next + ?)
	WHERE name = ? AND next <= 9223372036854775807 - ?`
)

func (hiloRows) Backend() string { return "mysql" }

// Ensure's steps are idempotent; they run again if InnoDB rolls one back to break a
// deadlock between processes creating the same row.
func (r hiloRows) Ensure(ctx context.Context, name string, block uint64) (stored int64, err error) {
	err = idemsql.RetrySerializationFailures(ctx, func() error {
		if err := migrate.Up(ctx, TxDB(r.db), migrate.HiLo); err != nil {
			return err
		}
		if _, err := r.db.ExecContext(ctx, hiloInsert, name, int64(block)); err != nil {
			return err
		}
		return r.db.QueryRowContext(ctx, hiloBlock, name).Scan(&stored)
	})
	return stored, err
}

// Reserve is one autocommit statement: the reply that carries the block comes after
// the commit.
func (r hiloRows) Reserve(ctx context.Context, name string, block uint64) (first int64, ok bool, err error) {
	res, err := r.db.ExecContext(ctx, hiloReserve, int64(block), name, int64(block))
	if err != nil {
		return 0, false, err
	}
	// The statement changes next whenever it matches the row (block > 0), so one
	// row is affected even without the driver's clientFoundRows.
	n, err := res.RowsAffected()
	if err != nil || n == 0 {
		return 0, false, err
	}
	after, err := res.LastInsertId()
	if err != nil {
		return 0, false, err
	}
	return after - int64(block), true, nil
}

func (r hiloRows) Next(ctx context.Context, name string) (next int64, err error) {
	err = r.db.QueryRowContext(ctx, hiloNext, name).Scan(&next)
	return next, err
}
