package idemseq

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/migrate"
)

// SQLTracker keeps producers' windows in the table idem_sequences, one row per
// (Config.Scope, producer). CheckTx joins the caller's transaction, so the number is
// recorded exactly when the effect commits.
type SQLTracker[Tx any] struct {
	db  idemsql.TxDB[Tx]
	sql *idemsql.SeqSQL // db's statements
	cfg Config
}

var _ Tracker = (*SQLTracker[*sql.Tx])(nil)

// OpenSQL returns a tracker on a database/sql handle to SQLite (modernc.org/sqlite)
// or PostgreSQL (pgx's stdlib driver), creating its table if missing. The dialect is
// detected from the database itself.
func OpenSQL(ctx context.Context, db *sql.DB, cfg Config) (*SQLTracker[*sql.Tx], error) {
	tdb, err := idemsql.SQLDB(ctx, db)
	if err != nil {
		return nil, err
	}
	return NewSQLTracker(ctx, tdb, cfg)
}

// NewSQLTracker returns a tracker on db, creating or upgrading its table (package
// migrate) unless cfg.SkipMigrate is set.
func NewSQLTracker[Tx any](ctx context.Context, db idemsql.TxDB[Tx], cfg Config) (*SQLTracker[Tx], error) {
	cfg, err := cfg.WithDefaults()
	if err != nil {
		return nil, err
	}
	if err := db.Validate(); err != nil {
		return nil, err
	}
	if err := migrate.Ensure(ctx, db, cfg.SkipMigrate, migrate.Sequences); err != nil {
		return nil, err
	}
	t := &SQLTracker[Tx]{db: db, sql: db.Driver.Seq(), cfg: cfg}
	return t, nil
}

// CheckTx records seq from producer at epoch inside tx. The verdict holds only if tx
// commits: on rollback the number is unrecorded, exactly like the effect. Concurrent
// checks of one producer serialize on its row until the first transaction ends.
func (t *SQLTracker[Tx]) CheckTx(ctx context.Context, tx Tx, producer string, epoch, seq uint64) (Verdict, error) {
	if err := CheckArgs(producer, epoch, seq); err != nil {
		return 0, err
	}
	v, err := t.check(ctx, t.db.Querier(tx), producer, epoch, seq)
	if err != nil {
		return 0, t.backendErr(ctx, "check", err)
	}
	return v, nil
}

// Check implements Tracker in a transaction of its own. Prefer CheckTx with the
// effect's transaction: a Check followed by a separate effect can lose the effect.
func (t *SQLTracker[Tx]) Check(ctx context.Context, producer string, epoch, seq uint64) (v Verdict, err error) {
	if err := CheckArgs(producer, epoch, seq); err != nil {
		return 0, err
	}
	err = t.inTx(ctx, "check", func(q idemsql.Querier) (err error) {
		v, err = t.check(ctx, q, producer, epoch, seq)
		return err
	})
	return v, err
}

func (t *SQLTracker[Tx]) check(ctx context.Context, q idemsql.Querier, producer string, epoch, seq uint64) (Verdict, error) {
	w, _ := NewWindow(t.cfg.Window) // validated in NewSQLTracker
	e, n, bitmap, err := t.lock(ctx, q, producer)
	if errors.Is(err, sql.ErrNoRows) { // pgx.ErrNoRows matches it too
		v, _ := w.Check(epoch, seq)
		inserted, ierr := q.Exec(ctx, t.sql.Insert, t.cfg.Scope, producer, int64(w.epoch), int64(w.next), w.Bitmap())
		if ierr != nil || inserted == 1 {
			return v, ierr
		}
		// A concurrent first check inserted the row: lock it and decide on it.
		w, _ = NewWindow(t.cfg.Window)
		e, n, bitmap, err = t.lock(ctx, q, producer)
	}
	if err != nil {
		return 0, err
	}
	if err := w.Load(uint64(e), uint64(n), bitmap); err != nil {
		return 0, err
	}
	v, changed := w.Check(epoch, seq)
	if changed {
		if _, err := q.Exec(ctx, t.sql.Update, t.cfg.Scope, producer, int64(w.epoch), int64(w.next), w.Bitmap()); err != nil {
			return 0, err
		}
	}
	return v, nil
}

// lock reads the producer's window and locks its row for the rest of the
// transaction: sql.ErrNoRows if there is none yet (only without Ensure).
func (t *SQLTracker[Tx]) lock(ctx context.Context, q idemsql.Querier, producer string) (epoch, next int64, bitmap []byte, err error) {
	if t.sql.Ensure != "" {
		if _, err := q.Exec(ctx, t.sql.Ensure, t.cfg.Scope, producer); err != nil {
			return 0, 0, nil, err
		}
	}
	err = q.QueryRow(ctx, t.sql.Lock, t.cfg.Scope, producer).Scan(&epoch, &next, &bitmap)
	return epoch, next, bitmap, err
}

// Register implements Tracker: one statement raises the producer's epoch.
func (t *SQLTracker[Tx]) Register(ctx context.Context, producer string) (r Registration, err error) {
	if err := CheckArgs(producer, 0, 0); err != nil {
		return Registration{}, err
	}
	err = t.inTx(ctx, "register", func(q idemsql.Querier) error {
		e, n, err := t.register(ctx, q, producer)
		if err != nil {
			return err
		}
		r = Registration{Producer: producer, Epoch: uint64(e), Next: uint64(n)}
		return nil
	})
	return r, err
}

// register raises the producer's epoch and reads the row's epoch and next.
func (t *SQLTracker[Tx]) register(ctx context.Context, q idemsql.Querier, producer string) (epoch, next int64, err error) {
	read := t.sql.Register
	if t.sql.Registered != "" {
		if _, err := q.Exec(ctx, t.sql.Register, t.cfg.Scope, producer); err != nil {
			return 0, 0, err
		}
		read = t.sql.Registered
	}
	err = q.QueryRow(ctx, read, t.cfg.Scope, producer).Scan(&epoch, &next)
	return epoch, next, err
}

// inTx runs fn in a transaction of its own, again if the database rolled it back to
// break a deadlock (MySQL does, between first checks of a new producer).
func (t *SQLTracker[Tx]) inTx(ctx context.Context, op string, fn func(idemsql.Querier) error) error {
	err := idemsql.RetrySerializationFailures(ctx, func() error {
		return t.db.InTx(ctx, func(tx Tx) error { return fn(t.db.Querier(tx)) })
	})
	if err != nil {
		return t.backendErr(ctx, op, err)
	}
	return nil
}

func (t *SQLTracker[Tx]) backendErr(ctx context.Context, op string, err error) error {
	var ie *idem.InputError
	if errors.As(err, &ie) {
		return err
	}
	if cerr := ctx.Err(); cerr != nil && !errors.Is(err, cerr) {
		err = fmt.Errorf("%w: %w", cerr, err)
	}
	return &idem.BackendError{Backend: t.db.Dialect().String(), Op: "seq." + op, Err: err}
}
