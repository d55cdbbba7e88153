// Package saga runs orchestrated sagas: multi-step business flows across systems no
// transaction covers (reserve stock → charge → ship → confirm), each step with a
// compensation, a semantic undo (release, refund, cancel).
//
// The orchestrator persists every saga instance (its state, the step it is at, the
// results so far) in the database, so a process restart resumes each saga where it
// stopped. Every action and every compensation runs through an effect.Fence with
// its own key lineage (the saga id, step "do:<name>" or "undo:<name>"), so a step
// re-run after a crash calls its service with the same derived idempotency key
// and is applied once.
//
// A step whose downstream deduplicates by that key itself may be Keyed (Step.Keyed):
// its action then skips the fence, is called with the same derived key, and its
// result is recorded only by the saga's own write after it, one write per step
// instead of three, as DBOS records a workflow step. A crash between the call and
// that write calls again with the same key, which the downstream must answer
// without acting twice; see Step.Keyed for exactly when that is safe. On
// PostgreSQL, the saves of concurrent sagas share one statement and one commit.
//
// A step that fails permanently (effect.Permanent, or MaxAttempts transient
// failures) turns the saga around: the steps before it are compensated in
// reverse order, each exactly once, and the saga ends COMPENSATED with the
// reason. A step that ran out of attempts on transient errors may have happened
// (a timeout after the request left), so it is compensated too; compensations
// must therefore accept an action that never took place (refund nothing). A
// compensation that fails permanently ends the saga FAILED with the reason: a
// person must look. Steps without a compensation say so (NoCompensation).
//
// # Tracing
//
// With a TracerProvider (Config.TracerProvider, else the global one once the
// application sets it), each advance of a saga under the orchestrator's lease is an
// idem.saga.advance span (idem.saga.id, idem.saga.name, and idem.saga.state when
// it ends); under it, each attempt of an action is an idem.saga.step span and each
// attempt of a compensation an idem.saga.compensate span (idem.saga.id, idem.step,
// idem.attempt), whose child is the fence's idem.effect.do span: an
// idemhttp.Transport in the step continues the same trace downstream. With no
// provider set, no span is started.
//
// # Operating
//
// Admin is that person's tool, on the database alone (no definitions needed, so
// the admin API and `idem sagas` run it anywhere): List by state, page by page;
// Get with each step's effect; RetryStep to run a failed compensation or a step
// stuck in its backoff again now, under a running Orchestrator; Resolve to close a
// saga by hand with a note (state Resolved, never advanced again).
//
// # One bad saga
//
// One saga affects itself only. A saga an orchestrator cannot run is parked: its
// row cannot be decoded (results that are not a JSON object of base64 strings,
// written by hand or by another service; on SQLite, a value of another type in a
// typed column), or its step is not one of its definition's. A parked saga keeps
// its state; its Reason says when and why; the orchestrator logs it once and
// counts it (idem_sagas_total{outcome="parked"}); no orchestrator advances it until
// an operator corrects its row and retries it (Admin.RetryStep: it goes on from
// its step), or resolves it. Admin.List(ctx, Parked, …) lists the parked sagas. A
// step that panics fails its attempt, as an error would; one that hangs is cut at
// its Timeout (the Lease without one). A saga whose advance
// fails otherwise (a database error, a takeover) is tried again in a later round,
// and the others are advanced meanwhile; Run logs a round that fails, and
// collapses the rounds that fail after it. The failure texts a Reason keeps are
// cut to fit its column. An orchestrator polls only the sagas it has a Definition
// for: one of another name (another version's, or a row written with a wrong
// name) waits, Running, for an orchestrator that has it.
//
// # Retention
//
// A Sweeper, run with storekit.RunSweeper, deletes finished sagas (Completed,
// Compensated, Resolved) whose last change is older than SweepConfig.Retention
// (30 days by default), each in one transaction with its step effects and its
// resolution note; Admin.Purge does the same at once for an operator. A Start or
// Execute of a deleted saga's id starts a new saga: keep the retention above the
// longest time a caller may retry them. Running and Compensating sagas (in
// progress) and Failed ones (waiting for a person) are never deleted, whatever
// their age, and effect.Sweeper keeps their effects too. The sweeper exports
// idem_swept_total{backend="saga"} and
// idem_sweep_last_success_timestamp_seconds{backend="saga"}.
package saga

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/effect"
	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/internal/group"
	"github.com/idemhq/idem/internal/metrics"
	"github.com/idemhq/idem/internal/otelx"
	"github.com/idemhq/idem/migrate"
)

// States of a saga instance.
const (
	Running      = "running"      // actions in progress
	Compensating = "compensating" // a step failed; undoing the completed ones
	Completed    = "completed"    // every action done
	Compensated  = "compensated"  // turned around and fully undone
	Failed       = "failed"       // a compensation failed permanently: needs a person
	Resolved     = "resolved"     // resolved by hand (Admin.Resolve): never advanced again
)

// Parked is not a state but a filter of List and Admin.List: the Running and
// Compensating sagas an orchestrator set aside (Instance.Parked).
const Parked = "parked"

// Input is what an action or a compensation receives.
type Input struct {
	SagaID string
	// Key is the step's derived idempotency key: send it downstream (it is also in
	// the context for idemhttp.Transport).
	Key string
	// Data is the saga's input, given to Start.
	Data []byte
	// Results holds the results of the actions completed so far, by step name.
	Results map[string][]byte
}

// Step is one step of a saga.
type Step struct {
	Name   string
	Action func(ctx context.Context, in Input) ([]byte, error)
	// Compensate undoes Action (refund for charge). It gets the same Input, whose
	// Results include this step's own result when the action completed.
	Compensate func(ctx context.Context, in Input) error
	// NoCompensation declares that the step has nothing to undo (a read, a final
	// confirmation); a Step without Compensate must set it.
	NoCompensation bool
	// Timeout bounds one attempt of the action or the compensation: its context
	// ends then, and the attempt counts as a transient failure. Zero means the
	// orchestrator's Config.Lease (after which another orchestrator may take the
	// saga over): an attempt that hangs must not hold the orchestrator, which
	// advances its sagas one after the other, for ever.
	Timeout time.Duration
	// MaxAttempts is how many transient failures of the action turn the saga
	// around (compensations are retried until they succeed or fail permanently).
	// Zero means 5.
	MaxAttempts int
	// Keyed runs the action without the fence's PENDING write, for a downstream that
	// deduplicates by Input.Key itself (Stripe, an API following the IETF
	// Idempotency-Key draft, idemhttp's middleware): the action is called with the
	// step's derived key, the same key the fence would derive, and its result is
	// recorded only in the saga's own row, by the write that moves the saga to its
	// next step, as DBOS records a step's output after it. A fenced step writes
	// three times (PENDING, COMPLETE, the saga); a keyed one once.
	//
	// It is safe exactly when the downstream answers a repeated key with its first
	// answer, for as long as the saga may run this step again (the saga's Lease and
	// backoffs, an outage of this process): a crash between the call and the saga's
	// write, or a takeover after the lease, calls again with the same key, and the
	// downstream must not act twice. A step whose result is recorded is never
	// called again. It gives up what the fence's row gives: no effect row is
	// written for the action (Admin.Get shows its result in the saga's Results,
	// with no Effect), two orchestrators may call it at once with one key after a
	// lease passes (the downstream must answer the second, or refuse it with a
	// transient error), and Recover does not see it in flight. For a downstream
	// that honours no keys, or forgets them sooner, keep the default (false).
	// Compensate always runs through the fence.
	Keyed bool
}

// Definition is a named list of steps.
type Definition struct {
	Name  string
	Steps []Step
}

// Config configures an Orchestrator. The zero value is usable.
type Config struct {
	// Lease is how long one orchestrator owns a saga while advancing it; after it
	// another may take over (the first one is fenced). Default 30 s; keep it above
	// the longest step with its timeout. It is the timeout of a step without one.
	Lease time.Duration
	// Backoff is the delay before retrying a step after its attempt-th transient
	// failure. Default: 100 ms doubling, capped at 30 s, ±20% jitter.
	Backoff func(attempt int) time.Duration
	// PollInterval is how often Run looks for sagas to advance. Default 200 ms.
	PollInterval time.Duration
	// Now is the clock of leases and backoffs. Nil means time.Now.
	Now func() time.Time
	// Registerer receives idem_sagas_total{saga,outcome} (started, completed,
	// compensated, failed, parked) and the fence's idem_effects_total.
	Registerer prometheus.Registerer
	Logger     *slog.Logger
	// SkipMigrate leaves the schema alone, for deployments that apply `idem migrate
	// print` with their own tool: New then only checks that idem_sagas and
	// idem_effects are up to date, and fails with a *migrate.BehindError naming the
	// missing migration.
	SkipMigrate bool
	// TracerProvider receives the orchestrator's spans and its fence's (see
	// Tracing in the package documentation). Nil means the global provider; while
	// that is unset, or with a no-op provider, no span is started.
	TracerProvider trace.TracerProvider
	// crash, in tests, is called at named points of a step and may panic there.
	crash func(point string)
}

// Orchestrator starts and advances sagas. Several orchestrators (processes) may
// share one database: a saga is advanced by one at a time, under a lease.
type Orchestrator[Tx any] struct {
	db      idemsql.TxDB[Tx]
	fence   *effect.Fence[Tx]
	defs    map[string]*Definition
	names   []any            // the names of defs, sorted: the arguments of q's statements
	q       queries          // the statements that name them
	stmts   *idemsql.SagaSQL // the driver's statements
	cfg     Config
	metrics *prometheus.CounterVec
	tr      otelx.Tracer
	saves   *group.Batcher[saveCall] // nil: each save alone (group.go)
}

// Instance is the stored state of one saga.
type Instance struct {
	ID, Saga, State string
	// Step is the index of the step being run (Running) or compensated
	// (Compensating); len(Steps) when Completed, -1 when Compensated.
	Step     int
	Data     []byte
	Results  map[string][]byte
	Attempts int
	Reason   string // why it turned around or failed
	Created  time.Time
	Updated  time.Time
	// DecodeError, set by Admin's List and Get and by the Orchestrator's List (its
	// Get fails instead), says what of the stored row could not be decoded, "" when
	// all of it was: results that are not a JSON object of base64 strings, or on
	// SQLite a column holding a value of another type; Admin.Get adds its
	// resolution's columns, named "resolution.…". The fields it names hold what
	// could be read. No orchestrator advances such a saga (it parks it); an
	// operator can resolve it (Admin.Resolve), or correct the row and then retry
	// it.
	DecodeError string
	// Parked is set for a saga an orchestrator set aside because it cannot run it:
	// its row cannot be decoded (DecodeError), or its step is not one of its
	// definition's. Reason says why, and when. It keeps its state (Running or
	// Compensating), but no orchestrator finds it due again until an operator
	// retries it (Admin.RetryStep, once the row is corrected: the saga goes on
	// from where it was) or resolves it (Admin.Resolve). Each parking is logged,
	// once, and counted as idem_sagas_total{outcome="parked"}.
	Parked bool
}

// New returns an orchestrator for defs on db, creating its tables if needed.
func New[Tx any](ctx context.Context, db idemsql.TxDB[Tx], cfg Config, defs ...Definition) (*Orchestrator[Tx], error) {
	switch {
	case cfg.Lease < 0:
		return nil, &idem.InputError{Field: "Config.Lease", Reason: "is negative", Fix: "use a positive duration, or 0 for 30s"}
	case cfg.PollInterval < 0:
		return nil, &idem.InputError{Field: "Config.PollInterval", Reason: "is negative", Fix: "use a positive duration, or 0 for 200ms"}
	}
	if cfg.Lease == 0 {
		cfg.Lease = 30 * time.Second
	}
	if cfg.Backoff == nil {
		cfg.Backoff = defaultBackoff
	}
	if cfg.PollInterval == 0 {
		cfg.PollInterval = 200 * time.Millisecond
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	o := &Orchestrator[Tx]{db: db, defs: map[string]*Definition{}, cfg: cfg, tr: otelx.New(cfg.TracerProvider, nil)}
	for i := range defs {
		d := &defs[i]
		if err := check(d); err != nil {
			return nil, err
		}
		if _, dup := o.defs[d.Name]; dup {
			return nil, &idem.InputError{Field: "Definition.Name", Reason: fmt.Sprintf("%q is defined twice", d.Name), Fix: "give each saga its own name"}
		}
		o.defs[d.Name] = d
	}
	o.names = definedNames(o.defs)
	// idem_sagas here; effect.New below ensures idem_effects.
	if err := migrate.Ensure(ctx, db, cfg.SkipMigrate, migrate.Saga); err != nil {
		return nil, err
	}
	fence, err := effect.New(ctx, db, effect.Config{Lease: cfg.Lease, Now: cfg.Now, Registerer: cfg.Registerer, Logger: cfg.Logger,
		SkipMigrate: cfg.SkipMigrate, TracerProvider: cfg.TracerProvider})
	if err != nil {
		return nil, err
	}
	o.fence = fence
	o.stmts = db.Driver.Saga() // effect.New checked that db has a Driver
	o.q = newQueries(o.stmts, len(o.names))
	o.saves = o.newSaves()
	if o.metrics, err = metrics.Counters(cfg.Registerer, "idem_sagas_total",
		"Sagas by outcome: started, completed, compensated, failed, parked (set aside for an operator: its row cannot be decoded, or names a step its definition lacks).",
		"saga", "outcome"); err != nil {
		return nil, err
	}
	return o, nil
}

func check(d *Definition) error {
	if d.Name == "" {
		return &idem.InputError{Field: "Definition.Name", Reason: "is empty", Fix: "name the saga, e.g. \"order\""}
	}
	if len(d.Steps) == 0 {
		return &idem.InputError{Field: "Definition.Steps", Reason: "is empty", Fix: "give the saga at least one step"}
	}
	seen := map[string]bool{}
	for i, s := range d.Steps {
		field := fmt.Sprintf("Definition %q Steps[%d]", d.Name, i)
		switch {
		case s.Name == "" || seen[s.Name]:
			return &idem.InputError{Field: field + ".Name", Reason: fmt.Sprintf("%q is empty or repeated", s.Name), Fix: "give each step its own name"}
		case s.Action == nil:
			return &idem.InputError{Field: field + ".Action", Reason: "is nil", Fix: "pass the function that performs the step"}
		case s.Compensate == nil && !s.NoCompensation:
			return &idem.InputError{Field: field + ".Compensate", Reason: "is nil", Fix: "pass the undo, or set NoCompensation to declare the step has nothing to undo"}
		case s.Timeout < 0:
			return &idem.InputError{Field: field + ".Timeout", Reason: "is negative", Fix: "use a positive duration, or 0 for the orchestrator's Lease"}
		}
		seen[s.Name] = true
	}
	return nil
}

// Start creates saga id of definition name with input data, to be advanced by
// Run. Starting an id that exists does nothing and returns false: a retried Start
// never starts a second saga.
func (o *Orchestrator[Tx]) Start(ctx context.Context, name, id string, data []byte) (bool, error) {
	var created bool
	err := o.db.InTx(ctx, func(tx Tx) (err error) {
		created, err = o.StartTx(ctx, tx, name, id, data)
		return err
	})
	return created, err
}

// StartTx is Start in the caller's transaction: the saga exists if and only if the
// business write that asks for it commits.
func (o *Orchestrator[Tx]) StartTx(ctx context.Context, tx Tx, name, id string, data []byte) (bool, error) {
	return o.insert(ctx, o.db.Querier(tx), name, id, data, 0, 0)
}

// Execute starts saga id of definition name with input data and advances it at
// once, on the caller's goroutine, as far as it can go now (to its end, unless a
// step must wait for a retry), then returns it as it stands. The saga is created
// already leased to this orchestrator, in one statement: no poll and no separate
// lease, two commits fewer than Start followed by Run. What it leaves undone
// (a backoff, or a crash of this process) Run finishes, as for any saga.
//
// Executing an id that exists runs no step twice: it advances the saga only if it
// is due and no orchestrator holds it, and returns it.
func (o *Orchestrator[Tx]) Execute(ctx context.Context, name, id string, data []byte) (Instance, error) {
	now := o.cfg.Now()
	var created bool
	err := o.db.Auto(ctx, func(q idemsql.Querier) (err error) {
		created, err = o.insert(ctx, q, name, id, data, now.Add(o.cfg.Lease).UnixNano(), 1)
		return err
	})
	if err != nil {
		return Instance{}, err
	}
	if created {
		if data == nil {
			data = []byte{}
		}
		inst := Instance{ID: id, Saga: name, State: Running, Data: data, Results: map[string][]byte{}, Created: now, Updated: now}
		_, err = o.run(ctx, &inst, 1)
		return inst, err
	}
	if _, err := o.advance(ctx, id); err != nil {
		return Instance{}, err
	}
	inst, _, err := o.Get(ctx, id)
	return inst, err
}

// insert creates saga id, leased until lease with token (0 and 0: not leased).
func (o *Orchestrator[Tx]) insert(ctx context.Context, q idemsql.Querier, name, id string, data []byte, lease, token int64) (bool, error) {
	if _, ok := o.defs[name]; !ok {
		return false, &idem.InputError{Field: "name", Reason: fmt.Sprintf("no saga %q is defined", name), Fix: "pass its Definition to saga.New"}
	}
	if err := (idem.Key{Scope: "saga", ID: id}).Validate(); err != nil {
		return false, err
	}
	if data == nil {
		data = []byte{}
	}
	now := o.cfg.Now().UnixNano()
	n, err := q.Exec(ctx, o.stmts.Insert, id, name, data, now, lease, token)
	if err != nil {
		return false, &idem.BackendError{Backend: "saga", Op: "start", Err: err}
	}
	if n == 1 {
		o.count(name, "started")
	}
	return n == 1, nil
}

func (o *Orchestrator[Tx]) count(saga, outcome string) {
	if o.metrics != nil {
		o.metrics.WithLabelValues(saga, outcome).Inc()
	}
}

func defaultBackoff(attempt int) time.Duration {
	d := 100 * time.Millisecond << min(attempt-1, 10)
	d = min(d, 30*time.Second)
	return time.Duration(float64(d) * (0.8 + 0.4*rand.Float64()))
}
