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
// # The keyed path
//
// For a downstream that deduplicates by the derived key itself (Stripe, every API
// that follows the IETF Idempotency-Key draft, idemhttp's middleware), the
// PENDING write buys only a lease: after a crash, the retry derives the same key
// and the downstream answers with what it did the first time. Fence.DoKeyed skips
// it: it reads the effect's row (a recorded result or failure is returned without
// a call), calls with the derived key, and records the outcome in one write, first
// one wins; Fence.DoKeyedTx records it in the caller's transaction instead, so it
// commits, or not, with the caller's own writes. On Postgres, concurrent callers
// share the read and the write as the fence's writes are shared (one statement
// over arrays). An error that is not Permanent records nothing: the retry calls
// again with the same key.
//
// It is safe only when the downstream deduplicates by the key for at least as long
// as any caller may retry the effect (and the effect is not yet recorded), and
// when key and step are the same on every retry (idemkey.Derive is deterministic;
// a key made from a clock or a random number is not). It gives up: the lease (two
// processes may call the downstream at once with one key; the downstream must
// answer the second, as the draft's 409 Conflict or by waiting; a 409 is an error
// here, and the retry gets the first answer); the PENDING row (Admin and Recover
// do not see an effect in flight, and nothing calls again a crashed caller's effect:
// the caller's own retry does); and Reconcile. If the downstream forgets a key
// sooner than a retry comes, the effect happens twice: keep the two-write Do for
// such a downstream, and for one that honours no keys.
//
// Concurrent callers in one process share one call: the first of a Fence's
// DoKeyed callers on a key and step calls, the others wait for its answer (a
// waiter whose context ends stops waiting; if the call's context ends, all of them
// get its error and may retry). Callers in other processes call the downstream
// with the same key, which deduplicates them. Each caller then records; all but
// the first find the row and return what it holds. An effect the two-write fence
// holds (PENDING) is the fence's: DoKeyed then does what Do does.
//
// # Write-behind
//
// With Config.KeyedWriteBehind, DoKeyed does not wait for its record: once the
// call answers, it hands the outcome to the Fence's writer and returns. The
// writer writes what waits in one statement (unnest on PostgreSQL, one
// transaction elsewhere) while later records queue behind it, and until a record
// is written the Fence answers its effect from memory, without a call. That takes
// the record's round trip and commit off each caller's path, and shares the
// database's work per record among many.
//
// It is safe exactly when DoKeyed is; what it gives up is the record's
// durability when DoKeyed returns. A record not yet written when the process dies
// is lost as if the process had died between the call and the record: the next
// DoKeyed calls again with the same key, and the downstream answers from its own
// record. The window is longer (until the writer's next statement commits,
// instead of the caller's own), not of another kind. Other processes, Admin and
// Get see the effect once it is written. DoKeyedTx, Do and sagas are unaffected.
// Call Flush before the process exits on purpose.
//
// It is bounded: at most MaxDeferredRecords records, MaxDeferredBytes of results
// and reasons, wait; a DoKeyed that finds the bound reached records its own
// outcome and waits for the commit, so a slow or unreachable database slows the
// callers down instead of growing the memory. A batch the database refuses is
// written record by record; a record refused DeferredAttempts times (from 100 ms
// to 5 s apart) is given up, logged at error level with its key, step and the
// database's error, and counted in idem_effects_total{outcome="unrecorded"}; the
// next DoKeyed of that effect calls again. Nothing else waits on it; an outage
// longer than those attempts gives up the records that wait the same way. The
// gauge idem_effects_deferred (with Config.Registerer) is the records waiting.
//
// # Key propagation
//
// The call's context carries the derived key (idem.WithKey), so an
// idemhttp.Transport inside the call derives each outbound request's
// Idempotency-Key from it: one logical operation keeps one key lineage from the
// first inbound request to the last downstream call.
//
// # Tracing
//
// With a TracerProvider (Config.TracerProvider, else the global one once the
// application sets it), each Do is an idem.effect.do span, a child of the caller's,
// with idem.key, idem.step, idem.derived_key, idem.token (and idem.effect.takeover)
// once the effect is held, and idem.effect.outcome: called, replayed, in_progress,
// recovered, reconciled, fenced, failed or error, as idem_effects_total counts it
// (idem.duplicate for replayed and in_progress). The call's context carries the
// span, so an idemhttp.Transport inside it sends the span's traceparent downstream
// beside the derived Idempotency-Key. Recover is an idem.effect.recover span with
// an idem.effect.do span per effect it takes over; Config.Reconcile runs in an
// idem.effect.reconcile span (idem.effect.happened). With no provider set, no span
// is started.
//
// # Operating
//
// Admin lists effects on the database alone (no Fence or calls needed): pending
// ones, those past their lease that Recover would take over, failed ones, or the
// steps of one key, page by page; Get shows one with its result.
//
// One effect affects itself only. Recover goes past an effect it cannot recover
// (its call fails, or on SQLite its row holds a value of another type), which then
// waits behind the other effects due, and says how many failed. Admin lists and
// shows an effect whose row cannot be decoded with its DecodeError. The reason of
// a permanent failure is cut to MaxReasonLen and made storable as text, so that
// the fence can always record it.
//
// # Retention
//
// A complete effect is remembered for a retention, not for ever: a Sweeper,
// run with storekit.RunSweeper, deletes complete effects whose last change is older
// than SweepConfig.Retention (7 days by default), and Admin.Purge does the same at
// once for an operator. A Do of a deleted effect calls again, with the same
// derived key: keep the retention above the longest time a caller retries one
// effect. Neither ever deletes a pending effect (in progress, or waiting for
// Recover) or a failed one (an operator's to look at), whatever its age, nor the
// effects of a saga that is running, compensating or failed: the saga Sweeper
// deletes those with their saga once it has finished. The sweeper exports
// idem_swept_total{backend="effect"} and
// idem_sweep_last_success_timestamp_seconds{backend="effect"}.
package effect

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"go.opentelemetry.io/otel/trace"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/internal/metrics"
	"github.com/idemhq/idem/internal/otelx"
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
	// Registerer receives idem_effects_total{step,outcome} and, with
	// KeyedWriteBehind, idem_effects_deferred.
	Registerer prometheus.Registerer
	// Logger receives recoveries at info level, and failed or fenced lease
	// renewals at warn level. Default slog.Default().
	Logger *slog.Logger
	// SkipMigrate leaves the schema alone, for deployments that apply `idem migrate
	// print` with their own tool: New then only checks that idem_effects is up to
	// date, and fails with a *migrate.BehindError naming the missing migration.
	SkipMigrate bool
	// TracerProvider receives the fence's spans (see Tracing in the package
	// documentation). Nil means the global provider; while that is unset, or with
	// a no-op provider, no span is started.
	TracerProvider trace.TracerProvider
	// KeyedWriteBehind makes DoKeyed return as soon as the call answers, and
	// record its outcome in the background, many records to a statement, instead
	// of waiting for the record's commit (see "Write-behind" in the package
	// documentation for when that is safe). DoKeyedTx, Do and sagas are not
	// affected. Call Flush before the process exits. Off by default.
	KeyedWriteBehind bool
}

// Fence runs external effects at most once per key and step in effect. It is
// safe for concurrent use; several processes may share its table.
type Fence[Tx any] struct {
	db      idemsql.TxDB[Tx]
	q       *idemsql.EffectSQL // the driver's statements
	cfg     Config
	metrics *prometheus.CounterVec
	tr      otelx.Tracer
	groups  *groups // shared writes where the driver has them (group.go); nil elsewhere
	flights flights // DoKeyed's calls in flight (keyed.go)
	behind  *behind // DoKeyed's records not yet written (behind.go); nil without KeyedWriteBehind
}

// FailedError is an effect whose call failed permanently (Permanent): Do returns
// it again for the same key and step without calling.
type FailedError struct {
	Key, Step string
	// Reason is the call's error text, as recorded: within MaxReasonLen bytes.
	Reason string
}

// MaxReasonLen bounds the reason an effect that failed permanently records: its
// call's error text is cut to it, its NUL bytes and invalid UTF-8 replaced, so that
// every database's text column can hold it (a failure the fence could not record
// would be retried for ever).
const MaxReasonLen = 4096

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
func New[Tx any](ctx context.Context, db idemsql.TxDB[Tx], cfg Config) (*Fence[Tx], error) {
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
	f := &Fence[Tx]{db: db, q: db.Driver.Effect(), cfg: cfg, tr: otelx.New(cfg.TracerProvider, nil)}
	f.groups = f.newGroups()
	var err error
	if cfg.KeyedWriteBehind {
		if f.behind, err = newBehind(cfg.Registerer); err != nil {
			return nil, err
		}
	}
	if f.metrics, err = metrics.Counters(cfg.Registerer, "idem_effects_total",
		"External effects through the fence, by step and outcome (called, replayed, in_progress, recovered, reconciled, fenced, failed, error, unrecorded).",
		"step", "outcome"); err != nil {
		return nil, err
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
func (f *Fence[Tx]) Do(ctx context.Context, key, step string, call Call) (result []byte, err error) {
	if err := validateCall(key, step, call); err != nil {
		return nil, err
	}
	ctx, span := f.startDo(ctx, key, step)
	defer func() { endDo(span, err) }()
	return f.doFenced(ctx, span, key, step, call)
}

// count counts outcome in idem_effects_total and sets it on span, the effect's
// idem.effect.do span (NoSpan when not traced).
func (f *Fence[Tx]) count(span trace.Span, step, outcome string) {
	if f.metrics != nil {
		f.metrics.WithLabelValues(step, outcome).Inc()
	}
	traceOutcome(span, outcome)
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

// validateCall is validate for Do and DoKeyed, with their call.
func validateCall(key, step string, call Call) error {
	if err := validate(key, step); err != nil {
		return err
	}
	if call == nil {
		return &idem.InputError{Field: "call", Reason: "is nil", Fix: "pass the function that performs the effect"}
	}
	return nil
}
