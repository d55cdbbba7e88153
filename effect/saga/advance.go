package saga

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/effect"
	"github.com/idemhq/idem/idemkey"
	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/internal/otelx"
	"github.com/idemhq/idem/internal/rowscan"
	"github.com/idemhq/idem/internal/sqltext"
)

// advance takes saga id's lease and runs its steps until it ends or must wait.
func (o *Orchestrator[Tx]) advance(ctx context.Context, id string) (bool, error) {
	inst, token, ok, err := o.lease(ctx, id)
	if err != nil || !ok {
		return false, err
	}
	return o.run(ctx, &inst, token)
}

// run runs the steps of inst, leased with token, until it ends or must wait.
func (o *Orchestrator[Tx]) run(ctx context.Context, inst *Instance, token int64) (_ bool, err error) {
	ctx, span := o.startAdvance(ctx, inst)
	defer func() { endAdvance(span, inst, err) }()
	def := o.defs[inst.Saga]
	if def == nil {
		return false, fmt.Errorf("saga %s: definition %q is not known to this orchestrator", inst.ID, inst.Saga)
	}
	for inst.State == Running || inst.State == Compensating {
		wait, err := o.step(ctx, def, inst)
		if err != nil {
			return true, err
		}
		if err := o.save(ctx, inst, token, wait); err != nil {
			return true, err
		}
		if wait > 0 {
			return true, nil
		}
		switch inst.State {
		case Completed, Compensated, Failed:
			o.count(inst.Saga, inst.State)
		}
	}
	return true, nil
}

// step runs one action or compensation of inst and moves inst on. A positive
// wait means: try again after it (a transient failure).
func (o *Orchestrator[Tx]) step(ctx context.Context, def *Definition, inst *Instance) (time.Duration, error) {
	if inst.State == Running {
		s := def.Steps[inst.Step]
		o.crash("before:" + s.Name)
		result, err := o.call(ctx, otelx.SpanSagaStep, inst, s, "do:", func(ctx context.Context, in Input) ([]byte, error) { return s.Action(ctx, in) })
		o.crash("after:" + s.Name)
		var fe *effect.FailedError
		switch {
		case err == nil:
			inst.Results[s.Name] = result
			inst.Step++
			inst.Attempts = 0
			if inst.Step == len(def.Steps) {
				inst.State = Completed
			}
		case errors.As(err, &fe):
			o.turnAround(inst, inst.Step-1, fmt.Sprintf("step %s failed: %s", s.Name, fe.Reason))
		case errors.Is(err, effect.ErrInProgress):
			return o.cfg.Lease / 4, nil // another orchestrator's call, or a crashed one's lease
		default:
			inst.Attempts++
			max := s.MaxAttempts
			if max <= 0 {
				max = 5
			}
			if inst.Attempts >= max {
				// It may have happened: compensate this step too.
				o.turnAround(inst, inst.Step, fmt.Sprintf("step %s failed %d times: %v", s.Name, inst.Attempts, err))
				return 0, nil
			}
			return o.cfg.Backoff(inst.Attempts), nil
		}
		return 0, nil
	}
	if inst.Step < 0 {
		inst.State = Compensated
		return 0, nil
	}
	s := def.Steps[inst.Step]
	if !s.NoCompensation {
		o.crash("before-undo:" + s.Name)
		_, err := o.call(ctx, otelx.SpanSagaCompensate, inst, s, "undo:", func(ctx context.Context, in Input) ([]byte, error) { return nil, s.Compensate(ctx, in) })
		o.crash("after-undo:" + s.Name)
		var fe *effect.FailedError
		switch {
		case errors.As(err, &fe):
			inst.State = Failed
			addReason(inst, fmt.Sprintf("compensation of %s failed: %s", s.Name, fe.Reason))
			return 0, nil
		case errors.Is(err, effect.ErrInProgress):
			return o.cfg.Lease / 4, nil
		case err != nil:
			inst.Attempts++
			return o.cfg.Backoff(inst.Attempts), nil
		}
	}
	inst.Step--
	inst.Attempts = 0
	if inst.Step < 0 {
		inst.State = Compensated
	}
	return 0, nil
}

func (o *Orchestrator[Tx]) turnAround(inst *Instance, from int, reason string) {
	inst.State, inst.Step, inst.Attempts, inst.Reason = Compensating, from, 0, ""
	addReason(inst, reason)
	if from < 0 {
		inst.State = Compensated
	}
}

// call runs fn for step s through the fence, under the step's timeout, in a span
// named span (idem.saga.step or idem.saga.compensate). A panic in fn is an error
// (protect). A step without a timeout has the lease's.
func (o *Orchestrator[Tx]) call(ctx context.Context, span string, inst *Instance, s Step, prefix string, fn func(context.Context, Input) ([]byte, error)) (_ []byte, err error) {
	ctx, sp := o.startStep(ctx, span, inst, s.Name)
	defer func() { endStep(sp, err) }()
	attempt := func(ctx context.Context, key string) ([]byte, error) {
		ctx, cancel := context.WithTimeout(ctx, cmp.Or(s.Timeout, o.cfg.Lease))
		defer cancel()
		out, err := o.protect(ctx, inst, prefix+s.Name, func() ([]byte, error) {
			return fn(ctx, Input{SagaID: inst.ID, Key: key, Data: inst.Data, Results: inst.Results})
		})
		o.crash("inside:" + prefix + s.Name) // between the call and its record
		return out, err
	}
	if s.Keyed && prefix == "do:" {
		return callKeyed(ctx, inst.ID, prefix+s.Name, attempt)
	}
	return o.fence.Do(ctx, inst.ID, prefix+s.Name, attempt)
}

// callKeyed runs a Keyed step's action with the key the fence would derive, in
// the context too (for idemhttp.Transport), and records nothing: the caller's save
// does. A permanent failure becomes the *effect.FailedError the fence would
// return, with the reason it would record.
func callKeyed(ctx context.Context, id, step string, attempt func(context.Context, string) ([]byte, error)) ([]byte, error) {
	key := idemkey.Derive(id, step)
	out, err := attempt(idem.WithKey(ctx, key), key)
	if err != nil && effect.IsPermanent(err) {
		return nil, &effect.FailedError{Key: id, Step: step, Reason: sqltext.Fit(err.Error(), effect.MaxReasonLen)}
	}
	return out, err
}

func (o *Orchestrator[Tx]) crash(point string) {
	if o.cfg.crash != nil {
		o.cfg.crash(point)
	}
}

// lease takes saga id if it is due, no other orchestrator holds it and this one
// has its definition. A saga it cannot run (unrunnable) is parked instead, in the
// same transaction, and ok is false.
func (o *Orchestrator[Tx]) lease(ctx context.Context, id string) (inst Instance, token int64, ok bool, err error) {
	now := o.cfg.Now().UnixNano()
	var why string
	err = o.db.InTx(ctx, func(tx Tx) error {
		q := o.db.Querier(tx)
		n, err := q.Exec(ctx, o.q.lease, append([]any{now + o.cfg.Lease.Nanoseconds(), id, now}, o.names...)...)
		if err != nil || n == 0 {
			return err
		}
		row, err := readSagaRow(ctx, q, o.stmts.Read, id)
		if err != nil {
			return err
		}
		inst, token = row.Instance, row.token
		if why = o.unrunnable(&inst); why != "" {
			return o.park(ctx, q, &inst, token, why)
		}
		ok = true
		return nil
	})
	if err != nil {
		return inst, 0, false, &idem.BackendError{Backend: "saga", Op: "lease", Err: err}
	}
	if why != "" {
		o.parked(ctx, &inst, why)
	}
	return inst, token, ok, nil
}

func (o *Orchestrator[Tx]) read(ctx context.Context, q idemsql.Querier, id string) (Instance, int64, error) {
	return readSaga(ctx, q, o.stmts.Read, id)
}

// readSaga reads saga id and its token with stmt, SagaSQL.Read or ReadForUpdate.
// A saga whose row cannot be decoded is an error: no orchestrator can advance it.
func readSaga(ctx context.Context, q idemsql.Querier, stmt, id string) (Instance, int64, error) {
	row, err := readSagaRow(ctx, q, stmt, id)
	if err == nil && row.DecodeError != "" {
		err = fmt.Errorf("saga %s: its row cannot be decoded: %s", id, row.DecodeError)
	}
	return row.Instance, row.token, err
}

// sagaRow is a row of idem_sagas.
type sagaRow struct {
	Instance
	token, nextAt, leaseUntil int64
}

// sagaColumns names the columns readSagaRow reads, for decode errors.
var sagaColumns = []string{"saga", "state", "step", "data", "results", "attempts", "reason", "token",
	"next_at", "lease_until", "created_at", "updated_at"}

// readSagaRow is readSaga for the operator, who must see a saga whose row cannot
// be decoded: what cannot is its DecodeError. It returns sql.ErrNoRows (which
// pgx.ErrNoRows matches too) for an unknown id.
func readSagaRow(ctx context.Context, q idemsql.Querier, stmt, id string) (sagaRow, error) {
	var row sagaRow
	var results string
	var created, updated int64
	// Query, not QueryRow: rowscan.Scan may read the row twice.
	rows, err := q.Query(ctx, stmt, id)
	if err != nil {
		return row, err
	}
	defer rows.Close()
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return row, err
		}
		return row, sql.ErrNoRows
	}
	inst := &row.Instance
	bad, err := rowscan.Scan(rows, sagaColumns, &inst.Saga, &inst.State, &inst.Step, &inst.Data, &results,
		&inst.Attempts, &inst.Reason, &row.token, &row.nextAt, &row.leaseUntil, &created, &updated)
	if err != nil {
		return row, err
	}
	inst.ID, inst.Created, inst.Updated, inst.Parked = id, time.Unix(0, created), time.Unix(0, updated), row.nextAt == parkedAt
	inst.DecodeError = rowscan.Join(bad, rowscan.JSON("results", results, &inst.Results, "a JSON object of base64 strings"))
	if inst.Results == nil {
		inst.Results = map[string][]byte{}
	}
	return row, rows.Err()
}

// save writes inst if token still holds it; a positive wait schedules the next
// attempt and gives the lease back.
func (o *Orchestrator[Tx]) save(ctx context.Context, inst *Instance, token int64, wait time.Duration) error {
	results, err := json.Marshal(inst.Results)
	if err != nil {
		return err
	}
	now := o.cfg.Now()
	next, lease := now.UnixNano(), now.Add(o.cfg.Lease).UnixNano()
	if wait > 0 {
		next, lease = now.Add(wait).UnixNano(), 0
	}
	if inst.State != Running && inst.State != Compensating {
		lease = 0
	}
	saved, err := o.write(ctx, saveCall{state: inst.State, step: inst.Step, results: string(results), attempts: inst.Attempts,
		reason: inst.Reason, next: next, lease: lease, now: now.UnixNano(), id: inst.ID, token: token})
	if err != nil {
		return &idem.BackendError{Backend: "saga", Op: "save", Err: err}
	}
	if !saved {
		return fmt.Errorf("saga %s: another orchestrator took it over: %w", inst.ID, idem.ErrLeaseLost)
	}
	return nil
}
