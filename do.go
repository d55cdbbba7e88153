package idem

import (
	"context"
	"time"
)

// finishTimeout bounds Complete and Release after the effect ran, when they run
// detached from the caller's (possibly cancelled) context.
const finishTimeout = 10 * time.Second

// Do claims c on s and, when the claim is acquired, runs fn and records its result.
// A duplicate does not run fn: Replayed returns the stored result, InProgress and
// Mismatch return no result. The error is fn's error (after the key was released so a
// retry can run) or the store's.
//
// Complete and Release run even if ctx was cancelled while fn ran, so an effect that
// happened is recorded. Do gives exactly-once results; the effect itself is
// exactly-once only if it is idempotent or commits with the key (see TxStore).
func Do(ctx context.Context, s Store, c Claim, fn func(ctx context.Context) ([]byte, error)) ([]byte, Outcome, error) {
	res, err := s.Claim(ctx, c)
	if err != nil {
		return nil, 0, err
	}
	switch res.Outcome {
	case Acquired:
	case Replayed:
		return res.Record.Result, Replayed, nil
	default:
		return nil, res.Outcome, nil
	}

	released := false
	release := func() {
		if released {
			return
		}
		released = true
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), finishTimeout)
		defer cancel()
		_ = s.Release(rctx, c.Key, res.Token) // the lease expires anyway if this fails
	}
	defer func() {
		if p := recover(); p != nil {
			release()
			panic(p)
		}
	}()

	out, err := fn(ctx)
	if err != nil {
		release()
		return nil, Acquired, err
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), finishTimeout)
	defer cancel()
	if err := s.Complete(cctx, c.Key, res.Token, out); err != nil {
		return out, Acquired, err
	}
	return out, Acquired, nil
}
