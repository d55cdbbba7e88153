package effect

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemkey"
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
func (f *Fence[Tx]) acquire(ctx context.Context, key, step string, expiredOnly bool) (claim, error) {
	var c claim
	now := f.cfg.Now().UnixNano()
	lease := now + f.cfg.Lease.Nanoseconds()
	err := f.db.InTx(ctx, func(tx Tx) error {
		q := f.db.Querier(tx)
		if !expiredOnly {
			n, err := q.Exec(ctx, `INSERT INTO idem_effects (key, step, state, token, lease_until, attempts, created_at, updated_at)
				VALUES ($1, $2, 'pending', 1, $3, 1, $4, $4) ON CONFLICT (key, step) DO NOTHING`, key, step, lease, now)
			if err != nil {
				return err
			}
			if n == 1 {
				c.token = 1
				return nil
			}
		}
		lock := ""
		if f.db.Dialect == idem.Postgres {
			lock = " FOR UPDATE"
		}
		var state, reason string
		var token, until int64
		var result []byte
		if err := q.QueryRow(ctx, `SELECT state, token, lease_until, result, reason FROM idem_effects WHERE key = $1 AND step = $2`+lock,
			key, step).Scan(&state, &token, &until, &result, &reason); err != nil {
			return err
		}
		switch {
		case state == StateComplete:
			c.done, c.result = true, result
			return nil
		case state == StateFailed:
			return &FailedError{Key: key, Step: step, Reason: reason}
		case until > now:
			return ErrInProgress
		}
		if _, err := q.Exec(ctx, `UPDATE idem_effects SET token = $1, lease_until = $2, attempts = attempts + 1, updated_at = $3
			WHERE key = $4 AND step = $5`, token+1, lease, now, key, step); err != nil {
			return err
		}
		c.token, c.takeover = token+1, true
		return nil
	})
	switch {
	case err == nil:
		return c, nil
	case errors.Is(err, ErrInProgress):
		f.count(step, "in_progress")
		return c, err
	case errors.As(err, new(*FailedError)):
		f.count(step, "failed")
		return c, err
	}
	return c, &idem.BackendError{Backend: "effect", Op: "acquire", Err: err}
}

// run calls (after reconciling a takeover) and records the outcome. The lease is
// renewed until the call (or the reconcile) returns, and not after: a renewal
// racing the release of a failed call would hold the effect for a whole lease.
func (f *Fence[Tx]) run(ctx context.Context, key, step string, c claim, call Call) ([]byte, error) {
	derived := idemkey.Derive(key, step)
	stop := f.heartbeat(ctx, key, step, c.token)
	defer stop()
	if c.takeover {
		f.cfg.Logger.Info("effect: taking over an effect whose lease expired", "key", key, "step", step, "token", c.token)
		if f.cfg.Reconcile != nil {
			result, happened, err := f.cfg.Reconcile(ctx, step, derived)
			if err != nil {
				f.count(step, "error")
				return nil, fmt.Errorf("effect %s/%s: reconcile: %w", key, step, err)
			}
			if happened {
				stop()
				f.count(step, "reconciled")
				return result, f.finish(ctx, key, step, c.token, StateComplete, result, "")
			}
		}
	}
	result, err := call(idem.WithKey(ctx, derived), derived)
	stop()
	if err != nil {
		if IsPermanent(err) {
			f.count(step, "failed")
			if ferr := f.finish(ctx, key, step, c.token, StateFailed, nil, err.Error()); ferr != nil {
				return nil, ferr
			}
			return nil, &FailedError{Key: key, Step: step, Reason: err.Error()}
		}
		f.count(step, "error")
		f.release(ctx, key, step, c.token)
		return nil, err
	}
	if c.takeover {
		f.count(step, "recovered")
	} else {
		f.count(step, "called")
	}
	return result, f.finish(ctx, key, step, c.token, StateComplete, result, "")
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
		t := time.NewTicker(max(f.cfg.Lease/3, time.Millisecond))
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			held, err := f.renew(ctx, key, step, token)
			switch {
			case ctx.Err() != nil:
				return
			case err != nil:
				f.cfg.Logger.Warn("effect: renewing the lease failed; another worker may take the effect over if this lasts",
					"key", key, "step", step, "token", token, "lease", f.cfg.Lease, "err", err)
			case !held:
				f.cfg.Logger.Warn("effect: lease lost while the call runs: another worker took the effect over; this call's result will not be recorded",
					"key", key, "step", step, "token", token)
				return
			}
		}
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
	var n int64
	err = f.db.InTx(ctx, func(tx Tx) (err error) {
		n, err = f.db.Querier(tx).Exec(ctx, `UPDATE idem_effects SET lease_until = $1, updated_at = $2
			WHERE key = $3 AND step = $4 AND token = $5 AND state = 'pending'`,
			now+f.cfg.Lease.Nanoseconds(), now, key, step, token)
		return err
	})
	return n == 1, err
}

// finish records the outcome if token still holds the effect.
func (f *Fence[Tx]) finish(ctx context.Context, key, step string, token int64, state string, result []byte, reason string) error {
	var n int64
	err := f.db.InTx(ctx, func(tx Tx) (err error) {
		n, err = f.db.Querier(tx).Exec(ctx, `UPDATE idem_effects SET state = $1, result = $2, reason = $3, updated_at = $4
			WHERE key = $5 AND step = $6 AND token = $7 AND state = 'pending'`,
			state, result, reason, f.cfg.Now().UnixNano(), key, step, token)
		return err
	})
	if err != nil {
		return &idem.BackendError{Backend: "effect", Op: "complete", Err: err}
	}
	if n == 0 {
		f.count(step, "fenced")
		return fmt.Errorf("effect %s/%s: token %d was taken over while the call ran; the newer holder records the effect: %w",
			key, step, token, idem.ErrLeaseLost)
	}
	return nil
}

// release ends this worker's lease after a failed call, so a retry need not wait
// for it. The effect stays PENDING: the call may have happened.
func (f *Fence[Tx]) release(ctx context.Context, key, step string, token int64) {
	ctx = context.WithoutCancel(ctx) // a call that failed because ctx ended must still release
	_ = f.db.InTx(ctx, func(tx Tx) error {
		_, err := f.db.Querier(tx).Exec(ctx, `UPDATE idem_effects SET lease_until = 0, updated_at = $1
			WHERE key = $2 AND step = $3 AND token = $4 AND state = 'pending'`, f.cfg.Now().UnixNano(), key, step, token)
		return err
	})
}
