package idemsqlite

import (
	"context"
	"database/sql"
	"errors"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/internal/sqlitegate"
	"modernc.org/sqlite"
)

type opKind uint8

const (
	opClaim opKind = iota + 1 // claims[0]
	opClaimBatch
	opComplete
	opRelease
	opRenew
	opSweep
)

func (k opKind) name() string {
	switch k {
	case opComplete:
		return "complete"
	case opRelease:
		return "release"
	case opRenew:
		return "renew"
	case opSweep:
		return "sweep"
	}
	return "claim"
}

// Op states. The caller and the writer race for a queued op with a CAS: if the
// caller abandons it first (its ctx ended), the writer never applies it; if the writer
// takes it first, it will be applied, and the caller waits for the answer.
const (
	queued int32 = iota
	taken
	abandoned
)

// op is one call handed to the writer.
type op struct {
	kind   opKind
	claims []idem.Claim
	key    idem.Key
	token  uint64
	result []byte
	limit  int           // opSweep
	lease  time.Duration // opRenew

	state atomic.Int32
	done  chan reply // buffered 1: the writer never blocks on an answer
}

type reply struct {
	results []idem.Result
	n       int   // rows swept
	err     error // idem.ErrLeaseLost, idem.ErrCompleted, or a *idem.BackendError
}

// writer applies the non-transactional calls of a Store with group commit: it takes
// every call queued while the previous commit was syncing and applies them all in one
// BEGIN IMMEDIATE … COMMIT on its own connection, so N concurrent calls cost one
// fsync instead of N. It is the only goroutine that uses conn.
type writer struct {
	s      *Store
	conn   *sql.Conn
	gate   *sqlitegate.Gate // held while BEGIN waits: in-process writers queue in order
	run    *groupRunner
	begin  *sql.Stmt
	end    *sql.Stmt // COMMIT
	queue  chan *op
	max    int
	exited chan struct{}

	commits, ops atomic.Uint64
}

func startWriter(ctx context.Context, s *Store) (*writer, error) {
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return nil, err
	}
	// The caller of New may have other settings on its pool; the writer's commits
	// follow Config, whatever the DSN said.
	for _, p := range []string{
		"PRAGMA synchronous = " + s.cfg.Synchronous.pragma(),
		"PRAGMA busy_timeout = " + strconv.FormatInt(s.cfg.BusyTimeout.Milliseconds(), 10),
	} {
		if _, err := conn.ExecContext(ctx, p); err != nil {
			_ = conn.Close()
			return nil, err
		}
	}
	st, err := prepare(ctx, conn)
	if err != nil {
		_ = conn.Close()
		return nil, err
	}
	w := &writer{
		s:      s,
		conn:   conn,
		gate:   sqlitegate.For(s.db),
		run:    &groupRunner{s: s, st: st},
		queue:  make(chan *op, s.cfg.MaxBatch),
		max:    s.cfg.MaxBatch,
		exited: make(chan struct{}),
	}
	if w.begin, err = conn.PrepareContext(ctx, "BEGIN IMMEDIATE"); err == nil {
		w.end, err = conn.PrepareContext(ctx, "COMMIT")
	}
	if err != nil {
		_ = w.close()
		return nil, err
	}
	go w.loop()
	return w, nil
}

// stop closes the queue (no sender holds it: Close took s.mu), waits for the writer
// to apply what was queued, and releases its connection.
func (w *writer) stop() error {
	close(w.queue)
	<-w.exited
	return w.close()
}

func (w *writer) close() error {
	err := w.run.st.close()
	for _, st := range []*sql.Stmt{w.begin, w.end} {
		if st != nil {
			err = errors.Join(err, st.Close())
		}
	}
	return errors.Join(err, w.conn.Close())
}

func (w *writer) loop() {
	defer close(w.exited)
	batch := make([]*op, 0, w.max)
	for first := range w.queue {
		w.commit(w.collect(append(batch[:0], first)))
		clear(batch[:cap(batch)]) // drop answered ops (and their results) for the GC
	}
}

// collect appends whatever is queued, up to the batch limit, without waiting.
func (w *writer) collect(batch []*op) []*op {
	for len(batch) < w.max {
		select {
		case o, ok := <-w.queue:
			if !ok {
				return batch
			}
			batch = append(batch, o)
		default:
			return batch
		}
	}
	return batch
}

// commit applies batch in one transaction and answers every op in it.
//
// Ops are taken only once the write lock is held, so a caller whose context ends
// while the writer waits for the lock (behind a business transaction) gets ctx.Err()
// and its op is never applied. An op whose SQL fails for a reason of its own (a
// result too big for SQLite) is answered with its error and the rest re-run in a
// fresh transaction; a failure of the file itself (I/O, disk full, busy timeout)
// fails the whole batch, which is what every op in it would have hit.
func (w *writer) commit(batch []*op) {
	ctx := context.Background() // a caller's cancellation must not cut a shared transaction
	if err := w.gate.Do(ctx, func() error { _, err := w.begin.ExecContext(ctx); return err }); err != nil {
		w.failAll(w.collect(batch), err)
		return
	}
	batch = w.collect(batch)
	live := batch[:0]
	for _, o := range batch {
		if o.state.CompareAndSwap(queued, taken) {
			live = append(live, o)
		}
	}
	replies := make([]reply, len(live))
	for len(live) > 0 {
		now := w.s.nowNs()
		w.run.reset()
		failed, err := -1, error(nil)
		for i, o := range live {
			if replies[i], err = w.apply(ctx, o, now); err != nil {
				failed = i
				break
			}
		}
		if failed < 0 {
			if err = w.run.flush(ctx); err == nil {
				_, err = w.end.ExecContext(ctx)
			}
			if err == nil {
				w.commits.Add(1)
				w.ops.Add(uint64(len(live)))
				for i, o := range live {
					o.done <- replies[i]
				}
				return
			}
		}
		w.rollback(ctx)
		if failed < 0 || !opSpecific(err) {
			w.failAll(live, err)
			return
		}
		live[failed].done <- reply{err: &idem.BackendError{Backend: backend, Op: live[failed].kind.name(), Err: explain(err, w.s.path)}}
		live = slices.Delete(live, failed, failed+1)
		replies = replies[:len(live)]
		if len(live) == 0 {
			return
		}
		if err := w.gate.Do(ctx, func() error { _, err := w.begin.ExecContext(ctx); return err }); err != nil {
			w.failAll(live, err)
			return
		}
	}
	w.rollback(ctx) // every op was abandoned: nothing to commit
}

// apply runs one op in the open transaction. The error is a database error; the
// op's own outcome (including ErrLeaseLost, ErrCompleted) is in the reply.
func (w *writer) apply(ctx context.Context, o *op, now int64) (reply, error) {
	q, s := w.run, w.s
	switch o.kind {
	case opClaim, opClaimBatch:
		results := make([]idem.Result, len(o.claims))
		for i, c := range o.claims {
			r, err := s.claimRecord(ctx, q, c, now)
			if err != nil {
				return reply{}, err
			}
			results[i] = r
		}
		return reply{results: results}, nil
	case opComplete:
		err := completeRecordIn(ctx, q, o.key, o.token, o.result, now)
		return reply{err: err}, dbErr(err)
	case opRelease:
		err := releaseRecordIn(ctx, q, o.key, o.token, now)
		return reply{err: err}, dbErr(err)
	case opRenew:
		err := renewRecordIn(ctx, q, o.key, o.token, o.lease, now)
		return reply{err: err}, dbErr(err)
	case opSweep:
		n, err := sweepRecordsIn(ctx, q, now, o.limit)
		return reply{n: n}, err
	}
	panic("idemsqlite: unknown op kind")
}

// dbErr keeps the errors that are answers (lease lost, completed) out of the
// database-failure path.
func dbErr(err error) error {
	if errors.Is(err, idem.ErrLeaseLost) || errors.Is(err, idem.ErrCompleted) {
		return nil
	}
	return err
}

func (w *writer) rollback(ctx context.Context) {
	// After I/O errors SQLite may already have rolled back; "no transaction is
	// active" is then expected and harmless.
	_, _ = w.conn.ExecContext(ctx, "ROLLBACK")
}

func (w *writer) failAll(ops []*op, err error) {
	for _, o := range ops {
		// An op already abandoned is skipped: its caller has returned ctx.Err().
		if !o.state.CompareAndSwap(queued, taken) && o.state.Load() != taken {
			continue
		}
		o.done <- reply{err: &idem.BackendError{Backend: backend, Op: o.kind.name(), Err: explain(err, w.s.path)}}
	}
}

// opSpecific reports whether a database error comes from one op's data, so the rest
// of its batch can still commit. Primary result codes: https://sqlite.org/rescode.html.
func opSpecific(err error) bool {
	var se *sqlite.Error
	if !errors.As(err, &se) {
		return false
	}
	switch se.Code() & 0xff {
	case 18, 19, 20, 25: // SQLITE_TOOBIG, SQLITE_CONSTRAINT, SQLITE_MISMATCH, SQLITE_RANGE
		return true
	}
	return false
}
