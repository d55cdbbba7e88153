package drivertest

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/migrate"
)

// stmtRunner runs one family's statements on a test's database, each failure
// naming the family's field, so that a driver's author reads which statement to
// correct.
type stmtRunner struct {
	t      *testing.T
	ctx    context.Context
	db     idemsql.TxDB[*sql.Tx]
	family string // "InboxSQL", the type that declares the fields
}

// newStmtRunner opens a database of db with the migration sets applied.
func newStmtRunner(t *testing.T, db func(t *testing.T) idemsql.TxDB[*sql.Tx], family string, sets ...migrate.Set) stmtRunner {
	t.Helper()
	r := stmtRunner{t: t, ctx: context.Background(), db: db(t), family: family}
	if err := migrate.Up(r.ctx, r.db, sets...); err != nil {
		t.Fatalf("applying the migrations of %v: %v", sets, err)
	}
	return r
}

// fatal ends the test with a message naming field.
func (r stmtRunner) fatal(field, format string, args ...any) {
	r.t.Helper()
	r.t.Fatalf("%s.%s: "+format, append([]any{r.family, field}, args...)...)
}

// errorf fails the test with a message naming field.
func (r stmtRunner) errorf(field, format string, args ...any) {
	r.t.Helper()
	r.t.Errorf("%s.%s: "+format, append([]any{r.family, field}, args...)...)
}

// need ends the test if field's statement is empty.
func (r stmtRunner) need(field, stmt string) {
	r.t.Helper()
	if stmt == "" {
		r.fatal(field, "is empty")
	}
}

// inTx runs fn in a transaction, ending the test if it fails.
func (r stmtRunner) inTx(field string, fn func(q idemsql.Querier) error) {
	r.t.Helper()
	if err := r.db.InTx(r.ctx, func(tx *sql.Tx) error { return fn(r.db.Querier(tx)) }); err != nil {
		r.fatal(field, "%v", err)
	}
}

// exec runs field's statement stmt in a transaction of its own and returns the
// rows it affected.
func (r stmtRunner) exec(field, stmt string, args ...any) int64 {
	r.t.Helper()
	r.need(field, stmt)
	var n int64
	r.inTx(field, func(q idemsql.Querier) (err error) {
		n, err = q.Exec(r.ctx, stmt, args...)
		return err
	})
	return n
}

// execErr runs field's statement stmt in a transaction of its own and returns its
// error.
func (r stmtRunner) execErr(field, stmt string, args ...any) error {
	r.t.Helper()
	r.need(field, stmt)
	return r.db.InTx(r.ctx, func(tx *sql.Tx) error {
		_, err := r.db.Querier(tx).Exec(r.ctx, stmt, args...)
		return err
	})
}

// row runs field's query stmt and scans its one row into dest; it reports
// whether there was one.
func (r stmtRunner) row(field, stmt string, args []any, dest ...any) bool {
	r.t.Helper()
	r.need(field, stmt)
	var err error
	r.inTx(field, func(q idemsql.Querier) error {
		err = q.QueryRow(r.ctx, stmt, args...).Scan(dest...)
		if errors.Is(err, sql.ErrNoRows) {
			return nil
		}
		return err
	})
	return err == nil
}

// rows runs field's query stmt and calls scan for each row.
func (r stmtRunner) rows(field, stmt string, args []any, scan func(rows idemsql.Rows) error) {
	r.t.Helper()
	r.need(field, stmt)
	r.inTx(field, func(q idemsql.Querier) error { return idemsql.EachRow(r.ctx, q, stmt, args, scan) })
}

// lockWait is how long holds gives a second transaction to get past a lock the
// first one holds. A slow machine can only make the check pass when it should
// not, never fail when it should pass.
const lockWait = 300 * time.Millisecond

// holds checks that lock, run in a transaction, holds what it locks until that
// transaction ends: lock run in a second transaction meanwhile must wait for it,
// and succeed once the first commits.
func (r stmtRunner) holds(field string, lock func(q idemsql.Querier) error) {
	r.t.Helper()
	tx, err := r.db.Begin(r.ctx)
	if err != nil {
		r.fatal(field, "begin: %v", err)
	}
	if err := lock(r.db.Querier(tx)); err != nil {
		_ = r.db.Rollback(r.ctx, tx)
		r.fatal(field, "%v", err)
	}
	second := make(chan error, 1)
	go func() {
		second <- r.db.InTx(r.ctx, func(tx *sql.Tx) error { return lock(r.db.Querier(tx)) })
	}()
	select {
	case err := <-second:
		_ = r.db.Rollback(r.ctx, tx)
		r.errorf(field, "ran in a second transaction while the first held the row (error: %v): it must lock the row until its transaction ends", err)
		return
	case <-time.After(lockWait):
	}
	if err := r.db.Commit(r.ctx, tx); err != nil {
		r.fatal(field, "commit: %v", err)
	}
	if err := <-second; err != nil {
		r.errorf(field, "failed in a second transaction once the first ended: %v", err)
	}
}
