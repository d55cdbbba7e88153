package idemsqlite

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/idemhq/idem/idemseq"
	"github.com/idemhq/idem/internal/wait"
	"github.com/idemhq/idem/migrate"
)

// HiLoTable returns an idemseq.BlockSource on the row name of the table idem_hilo,
// creating both if they are missing (the table through package migrate); the row
// holds the first id of the next block and the block size. Each NextBlock is one
// statement that advances the row and returns the block it skipped over; it commits
// on its own (db must not be inside a transaction, which a *sql.DB never is), so the
// block is durable before any of its ids is handed out, and a crash leaves a gap,
// never a reuse. Several *sql.DB handles, and processes, may share the file: SQLite
// serialises the statements (give the DSN a busy_timeout, e.g.
// _pragma=busy_timeout(10000), so they wait instead of failing with SQLITE_BUSY).
// Keep synchronous=FULL, SQLite's default, if a power loss must not roll back a
// block already handed out; a process crash is safe either way.
//
// The stored block size must equal block (see idemseq.TableSource for changing it).
// name is a plain identifier (letters, digits, underscore, at most 63 bytes), as for
// idempg.HiLoSequence, so one name works on both. Database failures are
// *idem.BackendError with Backend "sqlite".
func HiLoTable(ctx context.Context, db *sql.DB, name string, block uint64) (idemseq.BlockSource, error) {
	if err := idemseq.CheckSourceArgs(db, name, block, `sql.Open("sqlite", "file:ids.db?_pragma=busy_timeout(10000)")`); err != nil {
		return nil, err
	}
	return idemseq.TableSource(ctx, hiloRows{db}, name, block)
}

// hiloRows is idem_hilo in a SQLite database.
type hiloRows struct{ db *sql.DB }

const (
	hiloInsert = `INSERT INTO idem_hilo (name, next, block) VALUES (?1, 1, ?2) ON CONFLICT (name) DO NOTHING`
	hiloBlock  = `SELECT block FROM idem_hilo WHERE name = ?1`
	hiloNext   = `SELECT next FROM idem_hilo WHERE name = ?1`
	// The bound keeps next+block inside a signed 64-bit integer: past it SQLite
	// would silently turn the sum into a float and lose precision.
	hiloReserve = `UPDATE idem_hilo SET next = next + ?2
	WHERE name = ?1 AND next <= 9223372036854775807 - ?2
	RETURNING next - ?2`
)

func (hiloRows) Backend() string { return "sqlite" }

// Ensure: processes opening a new file at once can meet SQLITE_BUSY where the busy
// timeout does not apply (while the first one switches the file to WAL), so the
// steps, all idempotent, are tried again for up to hiloBusyFor.
func (r hiloRows) Ensure(ctx context.Context, name string, block uint64) (stored int64, err error) {
	deadline := time.Now().Add(hiloBusyFor)
	for pause := time.Millisecond; ; pause = min(2*pause, 100*time.Millisecond) {
		err = migrate.Up(ctx, TxDB(r.db), migrate.HiLo)
		if err == nil {
			_, err = r.db.ExecContext(ctx, hiloInsert, name, int64(block))
		}
		if err == nil {
			err = r.db.QueryRowContext(ctx, hiloBlock, name).Scan(&stored)
		}
		if err == nil || !sqliteBusy(err) || time.Now().After(deadline) || !wait.Sleep(ctx, pause) {
			return stored, err
		}
	}
}

// hiloBusyFor bounds the retries of Ensure.
const hiloBusyFor = 10 * time.Second

// sqliteBusy reports whether err is SQLITE_BUSY or one of its extended codes.
func sqliteBusy(err error) bool {
	var coded interface{ Code() int }
	return errors.As(err, &coded) && coded.Code()&0xff == 5
}

// Reserve reads the RETURNING row and then steps the statement to its end, which
// is when SQLite commits: an error in the commit is reported here rather than after
// the block is in use.
func (r hiloRows) Reserve(ctx context.Context, name string, block uint64) (first int64, ok bool, err error) {
	rows, err := r.db.QueryContext(ctx, hiloReserve, name, int64(block))
	if err != nil {
		return 0, false, err
	}
	defer rows.Close()
	for rows.Next() {
		if err := rows.Scan(&first); err != nil {
			return 0, false, err
		}
		ok = true
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return 0, false, err
	}
	return first, ok, nil
}

func (r hiloRows) Next(ctx context.Context, name string) (next int64, err error) {
	err = r.db.QueryRowContext(ctx, hiloNext, name).Scan(&next)
	return next, err
}
