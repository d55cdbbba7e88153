// Package sqlitegate queues the write transactions a process opens on one SQLite
// database in arrival order.
//
// SQLite does not queue writers: one that finds the write lock taken sleeps in its
// busy handler (up to 100 ms at a time) and tries again, so a writer that begins
// again as soon as it commits — a consumer with its next batch in hand — can hold
// the lock against a waiter until the waiter's busy_timeout runs out and it fails
// with SQLITE_BUSY, however short each transaction is. A restarted consumer's
// migration then fails, and a slow writer waits behind every fast one. Within a
// process idem's writers take a Gate first: a Go channel hands the lock over in
// FIFO order, and SQLite's busy handler is left to arbitrate between processes.
package sqlitegate

import (
	"context"
	"database/sql"
	"runtime"
	"sync"
	"time"
	"weak"
)

// Bound is how long Acquire waits for the gate before it lets its caller go on
// without it, to SQLite's own busy handling: a holder that never ends (a
// transaction its caller forgot) slows the others down but cannot stall them.
const Bound = 30 * time.Second

// A Gate admits one write transaction of its database at a time.
type Gate struct {
	ch chan struct{}

	mu   sync.Mutex
	held map[*sql.Tx]struct{} // transactions begun through Begin that hold ch
}

var gates sync.Map // weak.Pointer[sql.DB] → *Gate

// For returns db's Gate, the same for every caller in the process while db lives.
func For(db *sql.DB) *Gate {
	key := weak.Make(db)
	if g, ok := gates.Load(key); ok {
		return g.(*Gate)
	}
	g, loaded := gates.LoadOrStore(key, &Gate{ch: make(chan struct{}, 1), held: map[*sql.Tx]struct{}{}})
	if !loaded {
		runtime.AddCleanup(db, func(k weak.Pointer[sql.DB]) { gates.Delete(k) }, key)
	}
	return g.(*Gate)
}

// Acquire waits for the gate. held is false when it waited Bound without getting
// it: the caller goes on ungated and must not Release. The error is ctx's.
func (g *Gate) Acquire(ctx context.Context) (held bool, err error) {
	select { // the common case: free, no timer
	case g.ch <- struct{}{}:
		return true, nil
	default:
	}
	t := time.NewTimer(Bound)
	defer t.Stop()
	select {
	case g.ch <- struct{}{}:
		return true, nil
	case <-ctx.Done():
		return false, ctx.Err()
	case <-t.C:
		return false, nil
	}
}

// Release lets the next waiter in. Only a caller whose Acquire held the gate calls it.
func (g *Gate) Release() { <-g.ch }

// Begin begins a transaction of db holding the gate; End, called by the
// transaction's Commit and Rollback (twice is harmless), lets the next one in.
func (g *Gate) Begin(ctx context.Context, db *sql.DB, opts *sql.TxOptions) (*sql.Tx, error) {
	held, err := g.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	tx, err := db.BeginTx(ctx, opts)
	if err != nil || !held {
		if held {
			g.Release()
		}
		return tx, err
	}
	g.mu.Lock()
	g.held[tx] = struct{}{}
	g.mu.Unlock()
	return tx, nil
}

// End releases the gate if tx holds it.
func (g *Gate) End(tx *sql.Tx) {
	g.mu.Lock()
	_, ok := g.held[tx]
	delete(g.held, tx)
	g.mu.Unlock()
	if ok {
		g.Release()
	}
}
