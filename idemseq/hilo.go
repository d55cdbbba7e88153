package idemseq

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"sync"

	"github.com/idemhq/idem"
)

// MaxBlockSize bounds the block size of a HiLo source. Every restart or crash of a
// process throws away the rest of its block, so a larger block burns ids faster than
// it saves round trips; it also keeps first+size far from the end of the id space.
const MaxBlockSize = 1 << 32

// ErrOutOfIDs is returned when a block would reach past 1<<63-1, the largest id that
// fits a signed 64-bit column (Postgres and MySQL bigint, SQLite INTEGER). Ids never wrap
// around to small values, which would repeat ids handed out long ago; the sequence
// has to be moved to a new name instead. It is final: retrying cannot help.
var ErrOutOfIDs = errors.New("idemseq: out of ids: the next block would pass 1<<63-1; start a new sequence name")

// BlockSource hands out disjoint blocks of ids: each NextBlock returns the first id
// of a block of BlockSize() ids that no other call, in any process, ever returns
// again, even after a crash. A HiLo turns one NextBlock round trip into BlockSize()
// ids, so the source is the only part that has to be shared between processes.
//
// The durable sources are the drivers': idempg.HiLoSequence, idemsqlite.HiLoTable
// and idemmysql.HiLoTable. Anything that can hand out disjoint ranges (a Redis
// INCRBY, an etcd counter) fits the same two methods; CheckSourceArgs and
// SourceError give it the checks and errors of theirs.
type BlockSource interface {
	// NextBlock reserves a block and returns its first id. A block that NextBlock
	// returned is never returned again, even if the caller never uses it.
	NextBlock(ctx context.Context) (first uint64, err error)
	// BlockSize is the number of ids in every block; it does not change.
	BlockSize() uint64
}

// HiLo hands out unique ids from blocks reserved in a BlockSource: the "hi" part
// costs one round trip per block, the "lo" part is a counter in memory. It is safe
// for concurrent use; callers that find the block used up share one NextBlock call
// instead of each making their own. Create it with NewHiLo; one per source per
// process is enough, since its callers already share each round trip.
//
// Ids are unique across every HiLo on the same source, in any process, but they are
// not dense and only roughly ordered: a process that stops or crashes abandons the
// rest of its block (a gap, by design, never a reuse), and two processes hand out
// ids from different blocks at the same time, so an id from one can be smaller than
// an earlier id from the other. Within one HiLo, ids increase. Use them as keys,
// not as counts or as an order of events.
type HiLo struct {
	src  BlockSource
	size uint64
	bad  error // a BlockSize out of range, reported by every Next

	mu    sync.Mutex
	next  uint64 // the next id to hand out
	end   uint64 // one past the last id of the current block; next == end: used up
	fetch *hiloFetch
}

// hiloFetch is one NextBlock call in flight, shared by every caller waiting for it.
type hiloFetch struct {
	done  chan struct{} // closed when err and retry are set
	err   error
	retry bool // the fetching caller's context ended: a waiter should fetch instead
}

// NewHiLo returns a HiLo that reserves blocks from src. The first Next makes the
// first round trip, so creating a HiLo costs nothing and a process that never asks
// for an id never burns a block.
func NewHiLo(src BlockSource) *HiLo {
	h := &HiLo{src: src}
	if src == nil {
		h.bad = &idem.InputError{Field: "src", Reason: "is nil",
			Fix: "pass a BlockSource such as idempg.HiLoSequence or idemsqlite.HiLoTable"}
		return h
	}
	h.size = src.BlockSize()
	h.bad = hiloCheckBlock("BlockSize()", h.size)
	return h
}

// Next returns an id no other call of any HiLo on the same source returns. It makes
// a round trip only when the current block is used up, and then only one caller
// fetches while the others wait for that block; a waiter whose ctx ends returns
// ctx.Err() without waiting further. If the fetching caller's own ctx ends, another
// waiter takes over the fetch; any other NextBlock error is returned to every caller
// that waited for it, and the next Next tries again.
func (h *HiLo) Next(ctx context.Context) (uint64, error) {
	if h.bad != nil {
		return 0, h.bad
	}
	for {
		h.mu.Lock()
		if h.next < h.end {
			id := h.next
			h.next++
			h.mu.Unlock()
			return id, nil
		}
		f := h.fetch
		if f == nil {
			f = &hiloFetch{done: make(chan struct{})}
			h.fetch = f
			h.mu.Unlock()
			return h.fill(ctx, f)
		}
		h.mu.Unlock()
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-f.done:
		}
		if f.err != nil && !f.retry {
			return 0, f.err
		}
	}
}

// fill makes the round trip of f for every caller waiting on it, installs the block
// and takes its first id for the caller that fetched, so that caller cannot starve
// behind the waiters it just served.
func (h *HiLo) fill(ctx context.Context, f *hiloFetch) (uint64, error) {
	f.err, f.retry = errHiLoPanicked, true // what the waiters see if NextBlock panics
	defer func() {
		h.mu.Lock()
		h.fetch = nil
		h.mu.Unlock()
		close(f.done)
	}()
	first, err := h.src.NextBlock(ctx)
	if err == nil {
		err = hiloCheckRange(first, h.size)
	}
	if err != nil {
		f.err, f.retry = err, ctx.Err() != nil
		return 0, err
	}
	f.err, f.retry = nil, false
	h.mu.Lock()
	h.next, h.end = first+1, first+h.size
	h.mu.Unlock()
	return first, nil
}

var errHiLoPanicked = errors.New("idemseq: BlockSource.NextBlock panicked")

// hiloCheckRange refuses a block whose last id would pass the largest signed 64-bit
// value: stored back in a bigint it would be negative, and wrapping would repeat ids.
func hiloCheckRange(first, size uint64) error {
	if first > math.MaxInt64 || size-1 > math.MaxInt64-first {
		return fmt.Errorf("%w (block at %d of %d ids)", ErrOutOfIDs, first, size)
	}
	return nil
}

// hiloCheckBlock validates a block size, naming field in the error.
func hiloCheckBlock(field string, block uint64) error {
	switch {
	case block == 0:
		return &idem.InputError{Field: field, Reason: "is zero",
			Fix: "pass the number of ids one round trip reserves, e.g. 1000"}
	case block > MaxBlockSize:
		return &idem.InputError{Field: field, Reason: fmt.Sprintf("is %d, more than 1<<32", block),
			Fix: "use a smaller block: every restart abandons the rest of a block, so a huge one burns ids without saving round trips"}
	}
	return nil
}

// hiloCheckName validates a sequence name: a plain SQL identifier, so it can be spliced
// into DDL without quoting surprises and means the same thing in every backend.
func hiloCheckName(name string) error {
	fix := "use letters, digits and underscores, starting with a letter or underscore, at most 63 bytes (e.g. order_ids)"
	if name == "" {
		return &idem.InputError{Field: "name", Reason: "is empty", Fix: fix}
	}
	if len(name) > 63 {
		return &idem.InputError{Field: "name", Reason: fmt.Sprintf("is longer than 63 bytes (got %d)", len(name)), Fix: fix}
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		letter := c == '_' || ('a' <= c && c <= 'z') || ('A' <= c && c <= 'Z')
		if letter || (i > 0 && '0' <= c && c <= '9') {
			continue
		}
		return &idem.InputError{Field: "name", Reason: fmt.Sprintf("%q has %q at byte %d, not a plain identifier", name, c, i), Fix: fix}
	}
	return nil
}

// CheckSourceArgs validates the arguments of a BlockSource on a SQL database, before
// any round trip: db is not nil (open says how to get one, for the error's fix),
// name is a plain identifier (letters, digits, underscore, at most 63 bytes, so
// one name works on every database) and block is in 1..MaxBlockSize. Each is
// reported as an *idem.InputError on field db, name or block.
func CheckSourceArgs(db *sql.DB, name string, block uint64, open string) error {
	if db == nil {
		return &idem.InputError{Field: "db", Reason: "is nil", Fix: "pass a handle from " + open}
	}
	if err := hiloCheckName(name); err != nil {
		return err
	}
	return hiloCheckBlock("block", block)
}

// SourceError wraps a database failure of a BlockSource as an *idem.BackendError
// (retryable) naming backend and op ("hilo.open", "hilo.next"). If ctx ended, its
// error stays matchable with errors.Is even when the driver reported the
// cancellation in its own words.
func SourceError(ctx context.Context, backend, op string, err error) error {
	if cerr := ctx.Err(); cerr != nil && !errors.Is(err, cerr) {
		err = fmt.Errorf("%w: %w", cerr, err)
	}
	return &idem.BackendError{Backend: backend, Op: op, Err: err}
}
