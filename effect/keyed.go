package effect

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"sync"

	"go.opentelemetry.io/otel/trace"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemkey"
	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/internal/sqltext"
)

// DoKeyed runs call once in effect for key and step, for a downstream that
// deduplicates by the derived key itself (see "The keyed path" in the package
// documentation): with no PENDING write and no lease. A recorded result (or
// failure) is returned without calling; otherwise call runs with the derived key,
// shared by the callers of this Fence waiting on the same key and step, and its
// result is recorded in one statement (first one wins: a result recorded first by
// another process is returned instead). An error that is not Permanent records
// nothing: a retry calls again with the same key, and the downstream answers from
// its own record.
//
// An effect the two-write fence holds (PENDING: a Do runs it, or crashed in it)
// is left to that fence: DoKeyed then behaves as Do. With Config.KeyedWriteBehind
// the record is written after DoKeyed returns ("Write-behind" in the package
// documentation).
func (f *Fence[Tx]) DoKeyed(ctx context.Context, key, step string, call Call) ([]byte, error) {
	return f.doKeyed(ctx, nil, key, step, call)
}

// DoKeyedTx is DoKeyed with the result recorded in tx, the caller's transaction:
// it is recorded if and when tx commits, with the caller's own writes. A tx that
// rolls back records nothing, and the retry calls the downstream again with the
// same key (which it answers from its record). Read and record go through tx, so
// on Postgres a concurrent DoKeyedTx recording the same effect waits for tx to
// end. Only an effect the two-write fence holds is recorded outside tx, by Do.
func (f *Fence[Tx]) DoKeyedTx(ctx context.Context, tx Tx, key, step string, call Call) ([]byte, error) {
	return f.doKeyed(ctx, f.db.Querier(tx), key, step, call)
}

// doKeyed is DoKeyed and DoKeyedTx: q is the caller's transaction, nil for
// statements in transactions of their own.
func (f *Fence[Tx]) doKeyed(ctx context.Context, q idemsql.Querier, key, step string, call Call) (result []byte, err error) {
	if err := validateCall(key, step, call); err != nil {
		return nil, err
	}
	ctx, span := f.startDo(ctx, key, step)
	defer func() { endDo(span, err) }()
	if q == nil && f.behind != nil {
		if e, ok := f.behind.get(key, step); ok {
			return f.storedKeyed(span, e)
		}
	}
	stored, found, err := f.lookKeyed(ctx, q, key, step)
	if err != nil {
		return nil, err
	}
	if found {
		if stored.State == StatePending {
			return f.doFenced(ctx, span, key, step, call)
		}
		return f.storedKeyed(span, stored)
	}
	derived := idemkey.Derive(key, step)
	result, shared, err := f.flights.do(ctx, [2]string{key, step}, func() ([]byte, error) {
		return call(idem.WithKey(ctx, derived), derived)
	})
	switch {
	case err != nil && IsPermanent(err):
		reason := sqltext.Fit(err.Error(), MaxReasonLen)
		return f.recordKeyed(ctx, span, q, key, step, StateFailed, nil, reason, shared)
	case err != nil:
		f.count(span, step, "error")
		return nil, err
	}
	return f.recordKeyed(ctx, span, q, key, step, StateComplete, result, "", shared)
}

// doFenced is Do's body, once its span is started: DoKeyed runs it for an effect it
// found PENDING.
func (f *Fence[Tx]) doFenced(ctx context.Context, span trace.Span, key, step string, call Call) ([]byte, error) {
	c, err := f.acquire(ctx, span, key, step, false)
	if err != nil {
		return nil, err
	}
	if c.done {
		f.count(span, step, "replayed")
		return c.result, nil
	}
	return f.run(ctx, span, key, step, c, call)
}

// lookKeyed reads the effect's row, in q, or in a statement of its own or shared
// with other callers' (group.go).
func (f *Fence[Tx]) lookKeyed(ctx context.Context, q idemsql.Querier, key, step string) (Effect, bool, error) {
	if q != nil || f.groups == nil || f.groups.looks.Run == nil {
		return f.lookOne(ctx, q, key, step)
	}
	it, err := f.groups.looks.Do(ctx, lookCall{key: key, step: step})
	if err != nil {
		var be *idem.BackendError
		if !errors.As(err, &be) {
			err = &idem.BackendError{Backend: "effect", Op: "get", Err: err}
		}
		return Effect{}, false, err
	}
	return it.Val.e, it.Val.found, nil
}

// lookOne reads the effect's row with Get, in q or in a statement of its own.
func (f *Fence[Tx]) lookOne(ctx context.Context, q idemsql.Querier, key, step string) (e Effect, found bool, err error) {
	read := func(q idemsql.Querier) error {
		e, err = scanEffect(q.QueryRow(ctx, f.q.Get, key, step), true)
		return err
	}
	if q != nil {
		err = read(q)
	} else {
		err = f.db.Auto(ctx, read)
	}
	switch {
	case errors.Is(err, sql.ErrNoRows): // pgx.ErrNoRows matches it too
		return e, false, nil
	case err != nil:
		return e, false, &idem.BackendError{Backend: "effect", Op: "get", Err: err}
	case e.DecodeError != "":
		return e, false, &idem.BackendError{Backend: "effect", Op: "get",
			Err: fmt.Errorf("effect %s/%s cannot be decoded (%s): correct its row", key, step, e.DecodeError)}
	}
	return e, true, nil
}

// storedKeyed answers from a finished effect's row.
func (f *Fence[Tx]) storedKeyed(span trace.Span, e Effect) ([]byte, error) {
	if e.State == StateFailed {
		f.count(span, e.Step, "failed")
		return nil, &FailedError{Key: e.Key, Step: e.Step, Reason: e.Reason}
	}
	f.count(span, e.Step, "replayed")
	return e.Result, nil
}

// recordKeyed records the call's outcome, unless the effect has a row already: the
// first record wins, and a caller that finds one returns what it holds (the same
// answer, from a downstream that deduplicates), or, for a PENDING row (a Do began
// it since), its own result, which that Do's call will be answered with too.
func (f *Fence[Tx]) recordKeyed(ctx context.Context, span trace.Span, q idemsql.Querier, key, step, state string,
	result []byte, reason string, shared bool) ([]byte, error) {
	now := f.cfg.Now().UnixNano()
	if q == nil && f.behind != nil &&
		f.deferRecord(Effect{Key: key, Step: step, State: state, Result: slices.Clone(result), Reason: reason}, now) {
		return f.recorded(span, key, step, state, reason, result, shared)
	}
	var recorded bool
	var err error
	if q != nil {
		var n int64
		n, err = q.Exec(ctx, f.q.Record, key, step, state, result, reason, now)
		recorded = n == 1
	} else {
		recorded, err = f.record(ctx, key, step, state, result, reason, now)
	}
	if err != nil {
		f.count(span, step, "error")
		return nil, &idem.BackendError{Backend: "effect", Op: "record", Err: err}
	}
	if !recorded {
		stored, found, err := f.lookKeyed(ctx, q, key, step)
		if err != nil {
			return nil, err
		}
		if found && stored.State != StatePending {
			return f.storedKeyed(span, stored)
		}
	}
	return f.recorded(span, key, step, state, reason, result, shared)
}

// recorded answers a DoKeyed whose outcome it recorded (or deferred).
func (f *Fence[Tx]) recorded(span trace.Span, key, step, state, reason string, result []byte, shared bool) ([]byte, error) {
	switch {
	case state == StateFailed:
		f.count(span, step, "failed")
		return nil, &FailedError{Key: key, Step: step, Reason: reason}
	case shared:
		f.count(span, step, "replayed")
	default:
		f.count(span, step, "called")
	}
	return result, nil
}

// flights share one call among the callers of one Fence waiting on the same key
// and step (a singleflight): the first calls, the others wait for its answer.
type flights struct {
	mu sync.Mutex
	m  map[[2]string]*flight
}

type flight struct {
	done    chan struct{}
	result  []byte
	err     error
	waiters int // callers waiting on it besides the one calling, for tests
}

// errCallPanicked is what the callers sharing a call that panicked get.
var errCallPanicked = errors.New("effect: the shared call panicked")

// do runs call, or waits for the same id's call in flight; shared reports a wait.
// A waiter whose ctx ends stops waiting (the call goes on for the others). A call
// that panics fails its waiters with errCallPanicked and panics on.
func (fs *flights) do(ctx context.Context, id [2]string, call func() ([]byte, error)) (result []byte, shared bool, err error) {
	fs.mu.Lock()
	if fl, ok := fs.m[id]; ok {
		fl.waiters++
		fs.mu.Unlock()
		select {
		case <-fl.done:
			return fl.result, true, fl.err
		case <-ctx.Done():
			return nil, true, ctx.Err()
		}
	}
	if fs.m == nil {
		fs.m = map[[2]string]*flight{}
	}
	fl := &flight{done: make(chan struct{}), err: errCallPanicked}
	fs.m[id] = fl
	fs.mu.Unlock()
	defer func() {
		fs.mu.Lock()
		delete(fs.m, id)
		fs.mu.Unlock()
		close(fl.done)
	}()
	fl.result, fl.err = call()
	return fl.result, false, fl.err
}

// waiting is how many callers wait on id's call in flight.
func (fs *flights) waiting(id [2]string) int {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if fl, ok := fs.m[id]; ok {
		return fl.waiters
	}
	return 0
}
