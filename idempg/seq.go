package idempg

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemseq"
)

// NewSeqTracker returns an idemseq tracker keeping producers' sequence windows in the
// table idem_sequences of pool's database, created if missing. Its CheckTx takes the
// caller's pgx.Tx, so a sequence number is recorded exactly when the effect commits:
//
//	tx, _ := pool.Begin(ctx)
//	v, err := tracker.CheckTx(ctx, tx, msg.Producer, msg.Epoch, msg.Seq)
//	if v == idemseq.Accepted { apply(ctx, tx, msg) }
//	tx.Commit(ctx)
func NewSeqTracker(ctx context.Context, pool *pgxpool.Pool, cfg idemseq.Config) (*idemseq.SQLTracker[pgx.Tx], error) {
	return idemseq.NewSQLTracker(ctx, TxDB(pool), cfg)
}

// pgSequence is a BlockSource on a Postgres sequence that counts in blocks.
type pgSequence struct {
	db    *sql.DB
	name  string // as given, for messages
	ident string // the quoted, lower-cased identifier, also the regclass text
	block uint64
}

var _ idemseq.BlockSource = (*pgSequence)(nil)

// HiLoSequence returns an idemseq.BlockSource on the Postgres sequence name, creating it
// if it is missing as
//
//	CREATE SEQUENCE name AS bigint INCREMENT BY block MINVALUE 1 START 1 NO CYCLE
//
// Each nextval then returns the first id of a fresh block (Hibernate's "pooled"
// layout): the block size lives in the database, so every process agrees on it, and
// the database alone decides who gets which block. Sequences are not transactional:
// a value nextval returned is never returned again, even if the transaction around
// it rolls back or the process crashes, so a crash leaves a gap of at most one block
// and never hands a block out twice.
//
// The sequence's increment is read once, here. If it differs from block, the call
// fails with an *idem.InputError naming both: processes with different block sizes
// on one sequence would hand out overlapping ids. Growing the block is safe while
// processes run (ALTER SEQUENCE name INCREMENT BY bigger); shrinking is not, because
// a running process still uses the rest of its larger block: stop every process,
// then ALTER SEQUENCE name INCREMENT BY smaller RESTART WITH last_value + old block.
//
// name is a plain identifier (letters, digits, underscore, at most 63 bytes), found
// through the connection's search_path like any unqualified name; Postgres folds it
// to lower case, and so does HiLoSequence. Dropping the sequence forgets every
// block handed out: a sequence created again starts over at 1.
//
// db may be any database/sql handle on Postgres; with a pgx pool, pass
// stdlib.OpenDBFromPool(pool) (github.com/jackc/pgx/v5/stdlib). Database failures
// are *idem.BackendError with Backend "postgres".
func HiLoSequence(ctx context.Context, db *sql.DB, name string, block uint64) (idemseq.BlockSource, error) {
	if err := idemseq.CheckSourceArgs(db, name, block, `sql.Open("pgx", url), or stdlib.OpenDBFromPool(pool) for a pgx pool`); err != nil {
		return nil, err
	}
	s := &pgSequence{db: db, name: name, ident: `"` + strings.ToLower(name) + `"`, block: block}
	inc, found, err := s.increment(ctx)
	if err == nil && !found {
		_, cerr := db.ExecContext(ctx, hiloCreate(s.ident, block))
		// Two processes creating the sequence at once can both pass IF NOT EXISTS;
		// the loser's CREATE fails, yet the sequence is there: read again.
		inc, found, err = s.increment(ctx)
		if err == nil && !found {
			err = cerr
			if err == nil {
				err = fmt.Errorf("sequence %s not found after CREATE SEQUENCE", s.ident)
			}
		}
	}
	if err != nil {
		return nil, hiloPgErr(ctx, "hilo.open", err)
	}
	if inc != int64(block) {
		return nil, &idem.InputError{Field: "block",
			Reason: fmt.Sprintf("is %d, but sequence %s increments by %d", block, s.ident, inc),
			Fix: fmt.Sprintf("use block %d in every process, or grow the sequence's block with ALTER SEQUENCE %s INCREMENT BY %d "+
				"(shrinking needs every process stopped: see idempg.HiLoSequence)", inc, s.ident, block)}
	}
	return s, nil
}

// The statements of a Hi/Lo sequence: its increment and kind, resolving the name
// ($1, the quoted identifier) as nextval does; its next block ($1 the same).
const (
	hiloIncrement = `SELECT c.relkind::text, q.seqincrement
		FROM pg_catalog.pg_class c LEFT JOIN pg_catalog.pg_sequence q ON q.seqrelid = c.oid
		WHERE c.oid = to_regclass($1)`
	hiloNextval = `SELECT nextval($1::regclass)`
)

// hiloCreate creates the sequence ident (quoted) counting in blocks of block.
func hiloCreate(ident string, block uint64) string {
	return "CREATE SEQUENCE IF NOT EXISTS " + ident + " AS bigint INCREMENT BY " + strconv.FormatUint(block, 10) +
		" MINVALUE 1 START 1 NO CYCLE"
}

// increment reads the sequence's increment, resolving the name exactly as nextval
// will. found is false if no sequence has that name; a table or view of that name is
// an InputError, since nextval on it cannot work.
func (s *pgSequence) increment(ctx context.Context) (inc int64, found bool, err error) {
	var kind string
	var incr sql.NullInt64
	err = s.db.QueryRowContext(ctx, hiloIncrement, s.ident).Scan(&kind, &incr)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return 0, false, nil
	case err != nil:
		return 0, false, err
	case kind != "S" || !incr.Valid:
		return 0, false, &idem.InputError{Field: "name",
			Reason: fmt.Sprintf("%s names a relation that is not a sequence (relkind %s)", s.ident, kind),
			Fix:    "choose a name no table, view or index in the search_path uses"}
	}
	return incr.Int64, true, nil
}

// NextBlock is one round trip: nextval returns the first id of a block nobody else
// will get, committed at once whatever happens to the caller afterwards.
func (s *pgSequence) NextBlock(ctx context.Context) (uint64, error) {
	var first int64
	if err := s.db.QueryRowContext(ctx, hiloNextval, s.ident).Scan(&first); err != nil {
		var st interface{ SQLState() string }
		if errors.As(err, &st) && st.SQLState() == "2200H" { // sequence_generator_limit_exceeded
			return 0, fmt.Errorf("%w: %w", idemseq.ErrOutOfIDs, err)
		}
		return 0, hiloPgErr(ctx, "hilo.next", err)
	}
	if first < 1 {
		// Not a BackendError: retrying cannot fix the sequence's definition.
		return 0, fmt.Errorf("idemseq: sequence %s returned %d; ids start at 1: create it with MINVALUE 1", s.ident, first)
	}
	return uint64(first), nil
}

// BlockSize is the sequence's increment, checked against the database when opened.
func (s *pgSequence) BlockSize() uint64 { return s.block }

// hiloPgErr wraps a driver failure; an InputError passes through. If ctx ended, its
// error stays matchable with errors.Is even when the driver reported the
// cancellation in its own words.
func hiloPgErr(ctx context.Context, op string, err error) error {
	if errors.Is(err, idem.ErrInvalid) {
		return err
	}
	return idemseq.SourceError(ctx, "postgres", op, err)
}
