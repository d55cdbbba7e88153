package idemseq

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/internal/wait"
	"github.com/idemhq/idem/migrate"
)

// sqliteTable is a BlockSource on one row of the idem_hilo table.
type sqliteTable struct {
	db    *sql.DB
	name  string
	block uint64
}

var _ BlockSource = (*sqliteTable)(nil)

const (
	sqliteHiLoInsert = `INSERT INTO idem_hilo (name, next, block) VALUES (?1, 1, ?2) ON CONFLICT (name) DO NOTHING`
	sqliteHiLoBlock  = `SELECT block FROM idem_hilo WHERE name = ?1`
	// The bound keeps next+block inside a signed 64-bit integer: past it SQLite
	// would silently turn the sum into a float and lose precision.
	sqliteHiLoNext = `UPDATE idem_hilo SET next = next + ?2
	WHERE name = ?1 AND next <= 9223372036854775807 - ?2
	RETURNING next - ?2`
)

// SQLiteTable returns a BlockSource on the row name of the table idem_hilo, creating
// both if they are missing (the table through package migrate); the row holds the first id of the next block and the
// block size. Each NextBlock is one statement that advances the row and returns the
// block it skipped over; it commits on its own (db must not be inside a
// transaction, which a *sql.DB never is), so the block is durable before any of its
// ids is handed out, and a crash leaves a gap, never a reuse. Several *sql.DB
// handles, and processes, may share the file: SQLite serialises the statements
// (give the DSN a busy_timeout, e.g. _pragma=busy_timeout(10000), so they wait
// instead of failing with SQLITE_BUSY). Keep synchronous=FULL, SQLite's default, if
// a power loss must not roll back a block already handed out; a process crash is
// safe either way.
//
// The stored block size must equal block, or the call fails with an *idem.InputError
// naming both, so every process agrees. Each NextBlock advances the row by the size
// its own process was opened with, so changing the stored size is safe at any time:
// UPDATE idem_hilo SET block = n WHERE name = 'name'. Deleting the row forgets every
// block handed out; NextBlock reports a missing row instead of starting over at 1.
//
// name is a plain identifier (letters, digits, underscore, at most 63 bytes), as for
// PostgresSequence, so one name works on both. Database failures are
// *idem.BackendError with Backend "sqlite".
func SQLiteTable(ctx context.Context, db *sql.DB, name string, block uint64) (BlockSource, error) {
	if err := hiloCheckOpen(db, name, block, `sql.Open("sqlite", "file:ids.db?_pragma=busy_timeout(10000)")`); err != nil {
		return nil, err
	}
	stored, err := sqliteHiLoOpen(ctx, db, name, block)
	if err != nil {
		return nil, hiloBackendErr(ctx, "sqlite", "hilo.open", err)
	}
	if stored != int64(block) {
		return nil, hiloTableMismatch(name, block, stored)
	}
	return &sqliteTable{db: db, name: name, block: block}, nil
}

// sqliteHiLoOpen creates the table and the row if missing and returns the stored
// block size. Processes opening a new file at once can meet SQLITE_BUSY where the
// busy timeout does not apply (while the first one switches the file to WAL), so the
// steps, all idempotent, are tried again for up to openBusyFor.
func sqliteHiLoOpen(ctx context.Context, db *sql.DB, name string, block uint64) (stored int64, err error) {
	drv, err := idemsql.DriverFor(idemsql.SQLite)
	if err != nil {
		return 0, err
	}
	deadline := time.Now().Add(openBusyFor)
	for pause := time.Millisecond; ; pause = min(2*pause, 100*time.Millisecond) {
		err = migrate.Up(ctx, idemsql.SQLDBFor(drv, db), migrate.HiLo)
		if err == nil {
			_, err = db.ExecContext(ctx, sqliteHiLoInsert, name, int64(block))
		}
		if err == nil {
			err = db.QueryRowContext(ctx, sqliteHiLoBlock, name).Scan(&stored)
		}
		if err == nil || !sqliteBusy(err) || time.Now().After(deadline) || !wait.Sleep(ctx, pause) {
			return stored, err
		}
	}
}

// openBusyFor bounds the retries of sqliteHiLoOpen.
const openBusyFor = 10 * time.Second

// sqliteBusy reports whether err is SQLITE_BUSY or one of its extended codes.
func sqliteBusy(err error) bool {
	var coded interface{ Code() int }
	return errors.As(err, &coded) && coded.Code()&0xff == 5
}

// NextBlock is one autocommit statement. It reads the RETURNING row and then steps
// the statement to its end, which is when SQLite commits: an error in the commit is
// reported here rather than after the block is in use.
func (s *sqliteTable) NextBlock(ctx context.Context) (uint64, error) {
	rows, err := s.db.QueryContext(ctx, sqliteHiLoNext, s.name, int64(s.block))
	if err != nil {
		return 0, hiloBackendErr(ctx, "sqlite", "hilo.next", err)
	}
	defer rows.Close()
	var first int64
	got := false
	for rows.Next() {
		if err := rows.Scan(&first); err != nil {
			return 0, hiloBackendErr(ctx, "sqlite", "hilo.next", err)
		}
		got = true
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return 0, hiloBackendErr(ctx, "sqlite", "hilo.next", err)
	}
	if !got {
		return 0, hiloNoRow(ctx, s.db, "sqlite", s.name)
	}
	return uint64(first), nil
}

// BlockSize is the size this process reserves per round trip, checked against the
// stored one when opened.
func (s *sqliteTable) BlockSize() uint64 { return s.block }
