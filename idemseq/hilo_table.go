package idemseq

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/idemhq/idem"
)

// HiLoRows is one database's access to the table idem_hilo, whose rows each hold a
// Hi/Lo source: the first id of its next block (next) and the block size. TableSource
// turns it into a BlockSource; idemsqlite and idemmysql implement it, each with its
// database's one-statement way of reserving a block.
type HiLoRows interface {
	// Backend names the database in errors: "sqlite", "mysql".
	Backend() string
	// Ensure creates the table (package migrate) and the row name if missing, the
	// row at next 1 with block size block, and returns the row's stored block size.
	// Processes may call it at once: its steps are idempotent, and it tries them
	// again where the database refuses one for a moment.
	Ensure(ctx context.Context, name string, block uint64) (stored int64, err error)
	// Reserve moves the row's next on by block, in one statement that commits
	// before Reserve returns, unless that would pass 1<<63-1; it returns the first
	// id of the block it skipped over, and ok false if no row changed (deleted, or
	// at the end of the ids).
	Reserve(ctx context.Context, name string, block uint64) (first int64, ok bool, err error)
	// Next reads the row's next; sql.ErrNoRows if the row is gone.
	Next(ctx context.Context, name string) (int64, error)
}

// TableSource returns a BlockSource on the row name of idem_hilo in rows' database,
// creating both if they are missing. The stored block size must equal block, or the
// call fails with an *idem.InputError naming both, so every process agrees. Each
// NextBlock advances the row by the size its own process was opened with, so changing
// the stored size is safe at any time: UPDATE idem_hilo SET block = n WHERE name =
// 'name'. Deleting the row forgets every block handed out; NextBlock reports a
// missing row instead of starting over at 1.
//
// The drivers call it after CheckSourceArgs (idemsqlite.HiLoTable,
// idemmysql.HiLoTable). Database failures are *idem.BackendError with Backend
// rows.Backend().
func TableSource(ctx context.Context, rows HiLoRows, name string, block uint64) (BlockSource, error) {
	stored, err := rows.Ensure(ctx, name, block)
	if err != nil {
		return nil, SourceError(ctx, rows.Backend(), "hilo.open", err)
	}
	if stored != int64(block) {
		return nil, &idem.InputError{Field: "block",
			Reason: fmt.Sprintf("is %d, but row %q of idem_hilo stores block %d", block, name, stored),
			Fix: fmt.Sprintf("use block %d in every process, or change it with UPDATE idem_hilo SET block = %d WHERE name = '%s'",
				stored, block, name)}
	}
	return &tableSource{rows: rows, name: name, block: block}, nil
}

// tableSource is a BlockSource on one row of idem_hilo.
type tableSource struct {
	rows  HiLoRows
	name  string
	block uint64
}

// NextBlock is the one statement of Reserve: the block is durable before any of
// its ids is handed out, so a crash leaves a gap, never a reuse.
func (s *tableSource) NextBlock(ctx context.Context) (uint64, error) {
	first, ok, err := s.rows.Reserve(ctx, s.name, s.block)
	if err != nil {
		return 0, SourceError(ctx, s.rows.Backend(), "hilo.next", err)
	}
	if !ok {
		return 0, s.noRow(ctx)
	}
	return uint64(first), nil
}

// BlockSize is the size this process reserves per round trip, checked against the
// stored one when opened.
func (s *tableSource) BlockSize() uint64 { return s.block }

// noRow explains a Reserve that changed nothing: the row is at the end of the id
// space, or it was deleted (and must not silently start over at 1).
func (s *tableSource) noRow(ctx context.Context) error {
	next, err := s.rows.Next(ctx, s.name)
	switch {
	case err == nil:
		return fmt.Errorf("%w (row %q of idem_hilo is at %d)", ErrOutOfIDs, s.name, next)
	case errors.Is(err, sql.ErrNoRows):
		// Not a BackendError: retrying cannot bring the row back.
		return fmt.Errorf("idemseq: row %q of idem_hilo is gone; restore it with next past every id handed out, or use a new name", s.name)
	default:
		return SourceError(ctx, s.rows.Backend(), "hilo.next", err)
	}
}
