package effect

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemkey"
	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/internal/sqltext"
	"github.com/idemhq/idem/internal/wait"
)

// claim is the state acquire found or made.
type claim struct {
	done     bool   // complete: result holds the stored result
	result   []byte //
	token    int64  // the fencing token this worker holds
	takeover bool   // a previous holder's lease expired: its call may have happened
}

// acquire inserts the effect as PENDING, or takes it over if its lease expired.
// expiredOnly makes it refuse (ErrInProgress) an effect it would have to insert.
//
// A new effect, the common case, costs one statement in its own transaction (the
// insert); only an effect that exists already is read and decided under its row
// lock, in a transaction.
func (f *Fence[Tx]) acquire(ctx context.Context, span trace.Span, key, step string, expiredOnly bool) (claim, error) {
	now := f.cfg.Now().UnixNano()
	lease := now + f.cfg.Lease.Nanoseconds()
	var c claim
	if !expiredOnly && f.db.Read != nil {
		inserted, err := f.insertNew(ctx, key, step, lease, now)
		if err != nil {
			return c, &idem.BackendError{Backend: "effect", Op: "acquire", Err: err}
		}
		if inserted {
			c.token = 1
			traceClaim(span, c)
			return c, nil
		}
	}
	err := f.inTx(ctx, func(q idemsql.Querier) error {
		c = claim{}
		return f.acquireTx(ctx, q, key, step, expiredOnly, now, lease, &c)
	})
	switch {
	case err == nil:
		traceClaim(span, c)
		return c, nil
	case errors.Is(err, ErrInProgress):
		f.count(span, step, "in_progress")
		return c, err
	case errors.As(err, new(*FailedError)):
		f.count(span, step, "failed")
		return c, err
	}
	return c, &idem.BackendError{Backend: "effect", Op: "acquire", Err: err}
}

// inTx runs fn in a transaction, again if the database rolled it back to break a
// deadlock (MySQL does, between workers racing for one new effect).
func (f *Fence[Tx]) inTx(ctx context.Context, fn func(q idemsql.Querier) error) error {
	return idemsql.RetrySerializationFailures(ctx, func() error {
		return f.db.InTx(ctx, func(tx Tx) error { return fn(f.db.Querier(tx)) })
	})
}

// exec runs one statement in a transaction of its own (autocommit where the TxDB
// can: one round trip) and returns the rows it affected.
func (f *Fence[Tx]) exec(ctx context.Context, query string, args ...any) (n int64, err error) {
	err = idemsql.RetrySerializationFailures(ctx, func() error {
		return f.db.Auto(ctx, func(q idemsql.Querier) (err error) {
			n, err = q.Exec(ctx, query, args...)
			return err
		})
	})
	return n, err
}

// errRaced makes inTx run a transaction again: on MySQL, another worker inserted the
// effect between this one's read and its insert.
var errRaced = &raceError{}

type raceError struct{}

func (*raceError) Error() string    { return "effect: inserted concurrently" }
func (*raceError) SQLState() string { return "40001" }

func (f *Fence[Tx]) acquireTx(ctx context.Context, q idemsql.Querier, key, step string, expiredOnly bool, now, lease int64, c *claim) error {
	if f.q.LockFirst {
		// Lock the row first and insert only when there is none (MySQL: inserting
		// first would take a shared lock on an existing row and upgrade it below, and
		// waiting workers and the holder's COMPLETE would deadlock on it).
		return f.acquireLockFirst(ctx, q, key, step, expiredOnly, now, lease, c)
	}
	if !expiredOnly {
		n, err := q.Exec(ctx, f.q.Insert, key, step, lease, now)
		if err != nil {
			return err
		}
		if n == 1 {
			c.token = 1
			return nil
		}
	}
	var state, reason string
	var token, until int64
	var result []byte
	err := q.QueryRow(ctx, f.q.Lock, key, step).Scan(&state, &token, &until, &result, &reason)
	if errors.Is(err, sql.ErrNoRows) { // pgx.ErrNoRows matches it too
		return gone(expiredOnly)
	}
	if err != nil {
		return err
	}
	return f.decide(ctx, q, key, step, now, lease, state, reason, token, until, result, c)
}

// errGone is a recovery finding its effect deleted (a saga's, swept with its
// finished saga): there is nothing to take over.
var errGone = errors.New("effect: deleted since it was listed")

// gone answers an effect that a sweep deleted between this worker's insert (which
// found it) and its read: a Do runs its transaction again, which inserts it anew.
func gone(expiredOnly bool) error {
	if expiredOnly {
		return errGone
	}
	return errRaced
}

// decide answers from the effect's row: its stored result, its failure, another
// worker's live lease, or a takeover with the next token.
func (f *Fence[Tx]) decide(ctx context.Context, q idemsql.Querier, key, step string, now, lease int64,
	state, reason string, token, until int64, result []byte, c *claim) error {
	switch {
	case state == StateComplete:
		c.done, c.result = true, result
		return nil
	case state == StateFailed:
		return &FailedError{Key: key, Step: step, Reason: reason}
	case until > now:
		return ErrInProgress
	}
	if _, err := q.Exec(ctx, f.q.Takeover, token+1, lease, now, key, step); err != nil {
		return err
	}
	c.token, c.takeover = token+1, true
	return nil
}

func (f *Fence[Tx]) acquireLockFirst(ctx context.Context, q idemsql.Querier, key, step string, expiredOnly bool, now, lease int64, c *claim) error {
	var state, reason string
	var token, until int64
	var result []byte
	err := q.QueryRow(ctx, f.q.Lock, key, step).Scan(&state, &token, &until, &result, &reason)
	if errors.Is(err, sql.ErrNoRows) && !expiredOnly {
		n, err := q.Exec(ctx, f.q.Insert, key, step, lease, now)
		switch {
		case err != nil:
			return err
		case n != 1:
			return errRaced
		}
		c.token = 1
		return nil
	}
	if errors.Is(err, sql.ErrNoRows) {
		return errGone // expiredOnly: nothing to take over
	}
	if err != nil {
		return err
	}
	return f.decide(ctx, q, key, step, now, lease, state, reason, token, until, result, c)
}

// run calls (after reconciling a takeover) and records the outcome. The lease is
// renewed until the call (or the reconcile) returns, and not after: a renewal
// racing the release of a failed call would hold the effect for a whole lease.
//
// span is the effect's idem.effect.do span, whose context ctx carries: the call's
// context carries it too, so an idemhttp.Transport in the call continues the trace
// (its attempt spans are children of span, their traceparent sent downstream).
func (f *Fence[Tx]) run(ctx context.Context, span trace.Span, key, step string, c claim, call Call) ([]byte, error) {
	derived := idemkey.Derive(key, step)
	stop := f.heartbeat(ctx, key, step, c.token)
	defer stop()
	if c.takeover {
		f.cfg.Logger.Info("effect: taking over an effect whose lease expired", "key", key, "step", step, "token", c.token)
		if f.cfg.Reconcile != nil {
			result, happened, err := f.reconcile(ctx, step, derived)
			if err != nil {
				f.count(span, step, "error")
				return nil, fmt.Errorf("effect %s/%s: reconcile: %w", key, step, err)
			}
			if happened {
				stop()
				f.count(span, step, "reconciled")
				return result, f.finish(ctx, span, key, step, c.token, StateComplete, result, "")
			}
		}
	}
	result, err := call(idem.WithKey(ctx, derived), derived)
	stop()
	if err != nil {
		if IsPermanent(err) {
			f.count(span, step, "failed")
			reason := sqltext.Fit(err.Error(), MaxReasonLen)
			if ferr := f.finish(ctx, span, key, step, c.token, StateFailed, nil, reason); ferr != nil {
				return nil, ferr
			}
			return nil, &FailedError{Key: key, Step: step, Reason: reason}
		}
		f.count(span, step, "error")
		f.release(ctx, key, step, c.token)
		return nil, err
	}
	if c.takeover {
		f.count(span, step, "recovered")
	} else {
		f.count(span, step, "called")
	}
	return result, f.finish(ctx, span, key, step, c.token, StateComplete, result, "")
}

// heartbeat renews the lease of token every Lease/3 until stop is called; stop
// returns once no renewal is running. A renewal that finds the token gone (the
// effect was taken over: this worker was paused or cut off longer than a lease)
// is logged and ends the heartbeat; the call's outcome will then be refused
// (idem.ErrLeaseLost), as the new holder records the effect.
func (f *Fence[Tx]) heartbeat(ctx context.Context, key, step string, token int64) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		wait.Every(ctx, max(f.cfg.Lease/3, time.Millisecond), func() {
			held, err := f.renew(ctx, key, step, token)
			switch {
			case ctx.Err() != nil:
			case err != nil:
				f.cfg.Logger.Warn("effect: renewing the lease failed; another worker may take the effect over if this lasts",
					"key", key, "step", step, "token", token, "lease", f.cfg.Lease, "err", err)
			case !held:
				f.cfg.Logger.Warn("effect: lease lost while the call runs: another worker took the effect over; this call's result will not be recorded",
					"key", key, "step", step, "token", token)
				cancel() // the heartbeat ends
			}
		})
	}()
	var once sync.Once
	return func() {
		once.Do(func() {
			cancel()
			<-done
		})
	}
}

// renew extends the lease of token, if it still holds the PENDING effect.
func (f *Fence[Tx]) renew(ctx context.Context, key, step string, token int64) (held bool, err error) {
	now := f.cfg.Now().UnixNano()
	n, err := f.exec(ctx, f.q.Renew, now+f.cfg.Lease.Nanoseconds(), now, key, step, token)
	return n == 1, err
}

// finish records the outcome if token still holds the effect.
func (f *Fence[Tx]) finish(ctx context.Context, span trace.Span, key, step string, token int64, state string, result []byte, reason string) error {
	done, err := f.update(ctx, key, step, token, state, result, reason)
	if err != nil {
		return &idem.BackendError{Backend: "effect", Op: "complete", Err: err}
	}
	if !done {
		f.count(span, step, "fenced")
		return fmt.Errorf("effect %s/%s: token %d was taken over while the call ran; the newer holder records the effect: %w",
			key, step, token, idem.ErrLeaseLost)
	}
	return nil
}

// release ends this worker's lease after a failed call, so a retry need not wait
// for it. The effect stays PENDING: the call may have happened.
func (f *Fence[Tx]) release(ctx context.Context, key, step string, token int64) {
	ctx = context.WithoutCancel(ctx) // a call that failed because ctx ended must still release
	_, _ = f.exec(ctx, f.q.Release, f.cfg.Now().UnixNano(), key, step, token)
}
