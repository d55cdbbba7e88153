// Package sqlitegate queues the write transactions a process begins on one SQLite
// database in arrival order.
//
// SQLite does not queue writers: one that finds the write lock taken sleeps in its
// busy handler (up to 100 ms at a time) and tries again, so a writer that begins
// again as soon as it commits — a consumer with its next batch in hand — can take
// the lock back before a waiter wakes, until the waiter's busy_timeout runs out and
// it fails with SQLITE_BUSY, however short each transaction is. A restarted
// consumer's migration then fails, and a slow writer waits behind every fast one.
//
// Within a process idem's writers take a Gate around BEGIN: the one at the head of
// the line waits in SQLite's busy handler alone, and the writer that just committed
// queues behind it instead of taking the lock back. The gate is held only while
// BEGIN waits, never for the transaction, so a transaction its caller ends however
// it likes (Commit, Rollback, its context) cannot keep it; busy_timeout still
// bounds each wait, and SQLite arbitrates between processes as before.
package sqlitegate

import (
	"context"
	"database/sql"
	"runtime"
	"sync"
	"weak"
)

// A Gate admits one BEGIN of its database at a time, in arrival order.
type Gate struct{ ch chan struct{} }

var gates sync.Map // weak.Pointer[sql.DB] → *Gate

// For returns db's Gate, the same for every caller in the process while db lives.
func For(db *sql.DB) *Gate {
	key := weak.Make(db)
	if g, ok := gates.Load(key); ok {
		return g.(*Gate)
	}
	g, loaded := gates.LoadOrStore(key, &Gate{ch: make(chan struct{}, 1)})
	if !loaded {
		runtime.AddCleanup(db, func(k weak.Pointer[sql.DB]) { gates.Delete(k) }, key)
	}
	return g.(*Gate)
}

// Do runs begin holding the gate: blocked senders on a channel are served in
// arrival order. The error is ctx's when it ended first, else begin's.
func (g *Gate) Do(ctx context.Context, begin func() error) error {
	select {
	case g.ch <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-g.ch }()
	return begin()
}

// Begin begins a transaction of db through the gate.
func (g *Gate) Begin(ctx context.Context, db *sql.DB, opts *sql.TxOptions) (tx *sql.Tx, err error) {
	err = g.Do(ctx, func() error {
		tx, err = db.BeginTx(ctx, opts)
		return err
	})
	return tx, err
}
