package idemsqlite

import (
	"context"
	"database/sql"
	"strings"
)

// runner runs the prepared statements, and issues fencing tokens, inside one open
// write transaction.
type runner interface {
	exec(ctx context.Context, id stmtID, args ...any) (sql.Result, error)
	queryRow(ctx context.Context, id stmtID, args ...any) *sql.Row
	// token issues a fencing token and records it in the durable floor, in the
	// transaction that will store it.
	token(ctx context.Context, now int64) (uint64, error)
}

// groupRunner is the writer's: statements prepared on its connection, run inside the
// BEGIN IMMEDIATE it issued itself. Holding the write lock, it reads the durable
// token floor once per group and stores the highest token once before COMMIT.
type groupRunner struct {
	s      *Store
	st     *stmts
	loaded bool   // floor was read in this transaction
	floor  uint64 // highest token issued in this transaction, or the stored floor
	dirty  bool   // floor must be stored before COMMIT
}

// reset forgets the floor read in a transaction that was rolled back.
func (r *groupRunner) reset() { r.loaded, r.dirty = false, false }

func (r *groupRunner) exec(ctx context.Context, id stmtID, args ...any) (sql.Result, error) {
	return r.st[id].ExecContext(ctx, args...)
}

func (r *groupRunner) queryRow(ctx context.Context, id stmtID, args ...any) *sql.Row {
	return r.st[id].QueryRowContext(ctx, args...)
}

func (r *groupRunner) token(ctx context.Context, now int64) (uint64, error) {
	if !r.loaded {
		var last int64
		if err := r.queryRow(ctx, selectMeta).Scan(&last); err != nil {
			return 0, err
		}
		r.floor, r.loaded = uint64(last), true
	}
	r.floor = r.s.issue(now, r.floor+1)
	r.dirty = true
	return r.floor, nil
}

// flush stores the floor; the writer calls it just before COMMIT.
func (r *groupRunner) flush(ctx context.Context) error {
	if !r.dirty {
		return nil
	}
	_, err := r.exec(ctx, storeMeta, int64(r.floor))
	return err
}

// txRunner runs in a caller's transaction. Tx.StmtContext reuses the statement
// already prepared on the transaction's connection. A transaction from another
// *sql.DB on the same file cannot use them; it gets the SQL text instead.
type txRunner struct {
	s  *Store
	tx *sql.Tx
}

// errForeignStmt is database/sql's sticky error for a statement of another *sql.DB.
const errForeignStmt = "statement from different database used"

func (r txRunner) exec(ctx context.Context, id stmtID, args ...any) (sql.Result, error) {
	res, err := r.tx.StmtContext(ctx, r.s.st[id]).ExecContext(ctx, args...)
	if err != nil && strings.Contains(err.Error(), errForeignStmt) {
		return r.tx.ExecContext(ctx, stmtSQL[id], args...)
	}
	return res, err
}

func (r txRunner) queryRow(ctx context.Context, id stmtID, args ...any) *sql.Row {
	row := r.tx.StmtContext(ctx, r.s.st[id]).QueryRowContext(ctx, args...)
	if err := row.Err(); err != nil && strings.Contains(err.Error(), errForeignStmt) {
		return r.tx.QueryRowContext(ctx, stmtSQL[id], args...)
	}
	return row
}

// token raises the durable floor in the caller's transaction (other writers of the
// file wait for it, so the floor cannot move underneath) and the process floor,
// which outlives a rollback of the transaction.
func (r txRunner) token(ctx context.Context, now int64) (uint64, error) {
	var got int64
	if err := r.queryRow(ctx, raiseMeta, int64(r.s.issue(now, 0))).Scan(&got); err != nil {
		return 0, err
	}
	r.s.raiseFloor(uint64(got))
	return uint64(got), nil
}
