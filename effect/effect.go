// Package effect makes calls to systems outside the database (a payment API, a
// mail service, another team's service) happen once in effect, although no
// transaction can cover them.
//
// # The fence
//
// Fence.Do records the effect as PENDING in its own transaction (unique on key and
// step: a second caller finds the record and stops), commits, runs the call with
// a derived idempotency key, idemkey.Derive(key, step), and records the result as
// COMPLETE in a second transaction. A retry of a COMPLETE effect returns the
// stored result without calling again.
//
// While the call runs, the worker renews its lease every Lease/3 (only while its
// token still holds the effect), so a call slower than Lease keeps its effect: the
// lease protects against dead workers, not slow ones.
//
// A worker that crashes between its call and the COMPLETE leaves the effect
// PENDING. Once its lease has passed, the next Do (or Recover, the sweeper) takes
// the effect over with a higher fencing token and calls again with the same
// derived key, so a downstream that honours idempotency keys (Stripe, idemhttp's
// middleware) deduplicates the second call. The first worker, if it was only
// paused, is fenced: its late COMPLETE matches no record (idem.ErrLeaseLost).
//
// For a downstream that does not honour keys, Config.Reconcile asks it whether
// the effect happened before any call after a takeover (the ambiguous case: a
// timeout after the request left). Without either, this boundary is
// at-least-once, and no library can make it better: the only record of whether
// a charge happened is the payment provider's.
//
// # Key propagation
//
// The call's context carries the derived key (idem.WithKey), so an
// idemhttp.Transport inside the call derives each outbound request's
// Idempotency-Key from it: one logical operation keeps one key lineage from the
// first inbound request to the last downstream call.
package effect

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemkey"
	"github.com/idemhq/idem/internal/metrics"
	"github.com/idemhq/idem/migrate"
)

// DefaultLease is how long a PENDING effect belongs to the worker running it.
const DefaultLease = 30 * time.Second

// ErrInProgress is returned by Do when another worker holds the effect's lease:
// try again after the lease (the other worker may be slow or dead).
var ErrInProgress = errors.New("effect: in progress elsewhere")

// Call performs the external effect. key is the derived idempotency key to send
// downstream; ctx carries it too (idem.KeyFrom). The result is stored and
// returned to every later Do of the same key and step.
type Call func(ctx context.Context, key string) ([]byte, error)

// Reconcile asks the outside system whether the effect with this derived key
// already happened, before a retry after a takeover. happened true records result
// as the effect's result without calling again.
type Reconcile func(ctx context.Context, step, key string) (result []byte, happened bool, err error)

// Config configures a Fence. The zero value is usable.
type Config struct {
	// Lease is how long a PENDING effect belongs to a worker after its last sign
	// of life. A live worker renews it every Lease/3 while its call runs, so it
	// bounds how long a crashed worker's effect waits for a takeover, not how long
	// a call may take. Default DefaultLease.
	Lease time.Duration
	// Reconcile, if set, is asked before every call that follows a takeover.
	Reconcile Reconcile
	// Now is the clock of leases. Nil means time.Now.
	Now func() time.Time
	// Registerer receives idem_effects_total{step,outcome}.
	Registerer prometheus.Registerer
	// Logger receives recoveries at info level, and failed or fenced lease
	// renewals at warn level. Default slog.Default().
	Logger *slog.Logger
	// SkipMigrate leaves the schema alone, for deployments that apply `idem migrate
	// print` with their own tool: New then only checks that idem_effects is up to
	// date, and fails with a *migrate.BehindError naming the missing migration.
	SkipMigrate bool
}

// Fence runs external effects at most once per key and step in effect. It is
// safe for concurrent use; several processes may share its table.
type Fence[Tx any] struct {
	db      idem.TxDB[Tx]
	cfg     Config
	metrics *prometheus.CounterVec
}

// FailedError is an effect whose call failed permanently (Permanent): Do returns
// it again for the same key and step without calling.
type FailedError struct {
	Key, Step, Reason string
}

func (e *FailedError) Error() string {
	return fmt.Sprintf("effect %s/%s failed permanently: %s", e.Key, e.Step, e.Reason)
}

// PermanentError marks a call's error as final: Do records the effect as failed.
// It is idem.PermanentError, so errors marked by inbox.Permanent are final here too.
type PermanentError = idem.PermanentError

// Permanent marks err as final (a declined card): the effect is recorded as failed
// and not retried. Other errors leave it PENDING, to be retried with the same key.
// It is idem.Permanent; Permanent(nil) is nil.
func Permanent(err error) error { return idem.Permanent(err) }

// IsPermanent reports whether err, or an error it wraps, was marked by Permanent
// (this package's, inbox's or idem's).
func IsPermanent(err error) bool { return idem.IsPermanent(err) }

// New returns a Fence on db, creating its table idem_effects if needed.
func New[Tx any](ctx context.Context, db idem.TxDB[Tx], cfg Config) (*Fence[Tx], error) {
	if err := db.Validate(); err != nil {
		return nil, err
	}
	if cfg.Lease < 0 {
		return nil, &idem.InputError{Field: "Config.Lease", Reason: "is negative", Fix: "use a positive duration, or 0 for DefaultLease"}
	}
	if cfg.Lease == 0 {
		cfg.Lease = DefaultLease
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if err := migrate.Ensure(ctx, db, cfg.SkipMigrate, migrate.Effect); err != nil {
		return nil, err
	}
	f := &Fence[Tx]{db: db, cfg: cfg}
	if cfg.Registerer != nil {
		m, err := metrics.Register(cfg.Registerer, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "idem_effects_total",
			Help: "External effects through the fence, by step and outcome (called, replayed, in_progress, recovered, reconciled, fenced, failed, error).",
		}, []string{"step", "outcome"}))
		if err != nil {
			return nil, err
		}
		f.metrics = m
	}
	return f, nil
}

// States of an effect.
const (
	StatePending  = "pending"
	StateComplete = "complete"
	StateFailed   = "failed"
)

// Do runs call once in effect for key and step: see the package documentation.
// It returns the call's result, or the stored one for an effect already
// complete; ErrInProgress while another worker holds the lease; a *FailedError
// for an effect that failed permanently; and, if this worker lost its lease
// during the call, an error wrapping idem.ErrLeaseLost (the effect is the new
// holder's to record). Other errors leave the effect PENDING for a retry.
func (f *Fence[Tx]) Do(ctx context.Context, key, step string, call Call) ([]byte, error) {
	if err := validate(key, step); err != nil {
		return nil, err
	}
	if call == nil {
		return nil, &idem.InputError{Field: "call", Reason: "is nil", Fix: "pass the function that performs the effect"}
	}
	c, err := f.acquire(ctx, key, step, false)
	if err != nil {
		return nil, err
	}
	if c.done {
		f.count(step, "replayed")
		return c.result, nil
	}
	return f.run(ctx, key, step, c, call)
}

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

// Recover is the sweeper: it takes over up to limit PENDING effects of step whose
// lease has expired (their worker crashed between the call and the COMPLETE, or
// gave up after an error) and runs call for each, with the same derived key and
// after Reconcile. It returns how many it completed; the first error stops it.
// Run it periodically for every step, in one process or many.
func (f *Fence[Tx]) Recover(ctx context.Context, step string, limit int, call Call) (int, error) {
	if limit <= 0 {
		limit = 100
	}
	var keys []string
	err := f.db.InTx(ctx, func(tx Tx) error {
		rows, err := f.db.Querier(tx).Query(ctx, `SELECT key FROM idem_effects WHERE step = $1 AND state = 'pending' AND lease_until <= $2
			ORDER BY lease_until LIMIT $3`, step, f.cfg.Now().UnixNano(), limit)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var k string
			if err := rows.Scan(&k); err != nil {
				return err
			}
			keys = append(keys, k)
		}
		return rows.Err()
	})
	if err != nil {
		return 0, &idem.BackendError{Backend: "effect", Op: "recover", Err: err}
	}
	done := 0
	for _, key := range keys {
		c, err := f.acquire(ctx, key, step, true)
		if errors.Is(err, ErrInProgress) {
			continue // another sweeper or a retry got there first
		}
		if err != nil {
			return done, err
		}
		if c.done {
			continue
		}
		if _, err := f.run(ctx, key, step, c, call); err != nil {
			return done, err
		}
		done++
	}
	return done, nil
}

// Effect is the stored state of one effect.
type Effect struct {
	Key, Step, State string
	Token            int64
	Attempts         int
	Result           []byte
	Reason           string
	LeaseUntil       time.Time
}

// Get returns the stored effect of key and step, or ok false if there is none.
func (f *Fence[Tx]) Get(ctx context.Context, key, step string) (e Effect, ok bool, err error) {
	err = f.db.InTx(ctx, func(tx Tx) error {
		var until int64
		err := f.db.Querier(tx).QueryRow(ctx, `SELECT state, token, attempts, result, reason, lease_until FROM idem_effects WHERE key = $1 AND step = $2`,
			key, step).Scan(&e.State, &e.Token, &e.Attempts, &e.Result, &e.Reason, &until)
		if err != nil {
			return err
		}
		e.Key, e.Step, e.LeaseUntil, ok = key, step, time.Unix(0, until), true
		return nil
	})
	if errors.Is(err, sql.ErrNoRows) { // pgx.ErrNoRows matches it too
		return Effect{}, false, nil
	}
	if err != nil {
		return Effect{}, false, &idem.BackendError{Backend: "effect", Op: "get", Err: err}
	}
	return e, ok, nil
}

func (f *Fence[Tx]) count(step, outcome string) {
	if f.metrics != nil {
		f.metrics.WithLabelValues(step, outcome).Inc()
	}
}

func validate(key, step string) error {
	if err := (idem.Key{Scope: "effect", ID: key}).Validate(); err != nil {
		return err
	}
	if step == "" {
		return &idem.InputError{Field: "step", Reason: "is empty", Fix: "name the effect, e.g. \"charge\""}
	}
	if len(step) > 128 {
		return &idem.InputError{Field: "step", Reason: fmt.Sprintf("is %d bytes long", len(step)), Fix: "use a name of at most 128 bytes"}
	}
	return nil
}
