package effect

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/internal/isolate"
	"github.com/idemhq/idem/internal/otelx"
	"github.com/idemhq/idem/internal/rowscan"
)

// Recover is the sweeper: it takes over up to limit PENDING effects of step whose
// lease has expired (their worker crashed between the call and the COMPLETE, or
// gave up after an error) and runs call for each, with the same derived key and
// after Reconcile. It returns how many it completed. Run it periodically for every
// step, in one process or many.
//
// One effect affects itself only: an effect whose recovery fails (its call fails,
// or fails permanently, or on SQLite its row holds a value of another type) does
// not stop the others. Its lease is set to end now, behind the effects already
// due, so that effects that keep failing cannot fill every batch; Recover then
// returns, with the count, an error saying how many failed, wrapping the first
// failure.
func (f *Fence[Tx]) Recover(ctx context.Context, step string, limit int, call Call) (done int, err error) {
	if limit <= 0 {
		limit = 100
	}
	if !f.tr.Off() {
		var span trace.Span
		ctx, span = f.tr.Start(ctx, otelx.SpanEffectRecover, otelx.KindInternal...)
		defer func() {
			if span.IsRecording() {
				span.SetAttributes(otelx.KeyStep.String(step), otelx.KeyRecovered.Int(done))
			}
			otelx.End(span, err)
		}()
	}
	keys, err := f.due(ctx, step, limit)
	if err != nil {
		return 0, &idem.BackendError{Backend: "effect", Op: "recover", Err: err}
	}
	done, err = isolate.Each(ctx, keys, func(key string) (bool, error) {
		ran, err := f.recoverOne(ctx, key, step, call)
		if err != nil {
			f.pushBack(ctx, key, step)
		}
		return ran, err
	})
	var ie *isolate.Error
	if errors.As(err, &ie) {
		return done, fmt.Errorf("effect: %d of the %d effects of step %s past their lease could not be recovered now, and wait behind the others for a later Recover (%d were); the first: %w",
			ie.Failed, ie.Of, step, done, ie.First)
	}
	return done, err
}

// due returns the keys of up to limit PENDING effects of step past their lease,
// the longest past first.
func (f *Fence[Tx]) due(ctx context.Context, step string, limit int) (keys []string, err error) {
	err = f.db.InTx(ctx, func(tx Tx) (err error) {
		keys, err = rowscan.Strings(ctx, f.db.Querier(tx), f.q.Due, step, f.cfg.Now().UnixNano(), limit)
		return err
	})
	return keys, err
}

// pushBack sets the lease of key's effect, if it is still PENDING past it, to end
// now: a failed call's release ends it at the epoch, ahead of every effect due.
func (f *Fence[Tx]) pushBack(ctx context.Context, key, step string) {
	ctx = context.WithoutCancel(ctx) // as release: a failure must still move it
	_, _ = f.exec(ctx, f.q.PushBack, f.cfg.Now().UnixNano(), key, step)
}

// recoverOne takes key's effect over, if its lease still has expired, and runs
// call for it, in an idem.effect.do span of its own.
func (f *Fence[Tx]) recoverOne(ctx context.Context, key, step string, call Call) (ran bool, err error) {
	ctx, span := f.startDo(ctx, key, step)
	defer func() { endDo(span, err) }()
	c, err := f.acquire(ctx, span, key, step, true)
	if errors.Is(err, ErrInProgress) || errors.Is(err, errGone) {
		return false, nil // another sweeper or a retry got there first, or it was swept
	}
	if err != nil || c.done {
		return false, err
	}
	if _, err := f.run(ctx, span, key, step, c, call); err != nil {
		return false, err
	}
	return true, nil
}

// Effect is the stored state of one effect.
type Effect struct {
	Key, Step, State string
	Token            int64
	Attempts         int
	Result           []byte
	Reason           string
	LeaseUntil       time.Time
	// Created is when the effect was first recorded, Updated its last change.
	Created, Updated time.Time
	// DecodeError, set by Admin's List and Get only, says what of the stored row
	// could not be decoded, "" when all of it was: on SQLite, which keeps any value
	// in any column, a value of another type (text where a number belongs). The
	// fields it names hold their zero value. No Do or Recover can take such an
	// effect over: correct the row.
	DecodeError string
}

// Get returns the stored effect of key and step, or ok false if there is none.
func (f *Fence[Tx]) Get(ctx context.Context, key, step string) (e Effect, ok bool, err error) {
	err = f.db.InTx(ctx, func(tx Tx) error {
		var err error
		e, err = scanEffect(f.db.Querier(tx).QueryRow(ctx, f.q.Get, key, step), true)
		ok = err == nil
		return err
	})
	if errors.Is(err, sql.ErrNoRows) { // pgx.ErrNoRows matches it too
		return Effect{}, false, nil
	}
	if err != nil {
		return Effect{}, false, &idem.BackendError{Backend: "effect", Op: "get", Err: err}
	}
	return e, ok, nil
}
