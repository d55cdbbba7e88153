package saga

import (
	"context"
	"fmt"
	"math"
	"runtime/debug"
	"time"

	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/internal/sqltext"
)

// A saga an orchestrator cannot run is parked rather than failed: it keeps its
// state, so that once an operator corrects its row, Admin.RetryStep lets it go on
// from where it was (a Failed saga would be retried as a compensation, turning
// around a saga that was going forward), and Admin.Resolve closes it as for any
// saga in progress. The sweepers keep it, as any saga in progress.

// parkedAt is the next_at of a parked saga: no poll finds it due. Admin.RetryStep
// sets next_at to its own time, which un-parks it.
const parkedAt int64 = math.MaxInt64

// Bounds of Reason: each failure appended to it is cut to maxReasonPart bytes,
// and the whole to maxReasonLen (the middle goes; MySQL's TEXT holds 65,535).
const (
	maxReasonPart = 4 << 10
	maxReasonLen  = 16 << 10
)

// addReason appends add to inst's Reason, within its bounds, storable as text.
func addReason(inst *Instance, add string) {
	inst.Reason = sqltext.Join(inst.Reason, add, maxReasonPart, maxReasonLen)
}

// unrunnable says why this orchestrator cannot run inst, just read under its
// lease, or "" if it can.
func (o *Orchestrator[Tx]) unrunnable(inst *Instance) string {
	if inst.DecodeError != "" {
		return "its row cannot be decoded: " + inst.DecodeError
	}
	def := o.defs[inst.Saga]
	if def == nil { // the lease names the definitions: only a row changed meanwhile
		return fmt.Sprintf("no saga %q is defined", inst.Saga)
	}
	if n := len(def.Steps); inst.Step >= n || (inst.State == Running && inst.Step < 0) {
		return fmt.Sprintf("its step %d is not one of saga %q, whose steps are 0 to %d", inst.Step, inst.Saga, n-1)
	}
	return ""
}

// park sets inst aside in q, the transaction that leased it with token: its
// reason says why and what to do, its lease ends, and no poll finds it due.
func (o *Orchestrator[Tx]) park(ctx context.Context, q idemsql.Querier, inst *Instance, token int64, why string) error {
	now := o.cfg.Now()
	addReason(inst, fmt.Sprintf("parked at %s: %s: correct the row, then retry the saga; or resolve it",
		now.UTC().Format(time.RFC3339), why))
	inst.Parked = true
	_, err := q.Exec(ctx, o.stmts.Park, parkedAt, inst.Reason, now.UnixNano(), inst.ID, token)
	return err
}

// parked counts and logs the parking of inst, once.
func (o *Orchestrator[Tx]) parked(ctx context.Context, inst *Instance, why string) {
	o.count(inst.Saga, "parked")
	o.cfg.Logger.WarnContext(ctx, "saga: parked: this orchestrator cannot run it; correct its row and retry it, or resolve it",
		"id", sqltext.Fit(inst.ID, 255), "saga", inst.Saga, "state", inst.State, "why", why)
}

// protect runs fn, the action or compensation step of inst, and returns a panic
// in it as an error: a transient failure, retried as any, so that one step's bug
// cannot stop the orchestrator and every saga it advances.
func (o *Orchestrator[Tx]) protect(ctx context.Context, inst *Instance, step string, fn func() ([]byte, error)) (_ []byte, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%s panicked: %v", step, p)
			o.cfg.Logger.ErrorContext(ctx, "saga: a step panicked; it counts as a failed attempt", "id", sqltext.Fit(inst.ID, 255),
				"step", step, "attempt", inst.Attempts+1, "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
		}
	}()
	return fn()
}
