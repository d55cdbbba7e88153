package saga

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/internal/isolate"
	"github.com/idemhq/idem/internal/rowscan"
	"github.com/idemhq/idem/internal/wait"
	"github.com/idemhq/idem/internal/warn"
)

// pollBatch is how many due sagas RunOnce takes at a time.
const pollBatch = 32

// Run advances due sagas until ctx ends. A round that fails is logged, and the
// rounds after it that fail too are collapsed into a few lines (the 1st, 8th,
// 16th…) until one succeeds.
func (o *Orchestrator[Tx]) Run(ctx context.Context) error {
	rounds := warn.New(o.cfg.Logger, "saga: round failed", "saga: rounds succeed again")
	for {
		n, err := o.RunOnce(ctx)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err != nil {
			rounds.Fail(ctx, err)
		} else {
			rounds.OK(ctx)
		}
		if n == 0 || err != nil {
			if !wait.Sleep(ctx, o.cfg.PollInterval) {
				return ctx.Err()
			}
		}
	}
}

// RunOnce takes up to 32 due sagas of the definitions it has and advances each as
// far as it can go now. It returns how many it advanced.
//
// One saga affects itself only. A saga it cannot run (its row cannot be decoded,
// or its step is not one of its definition's) is parked: see Instance.Parked. A
// saga whose advance fails (its database write failed, or another orchestrator
// or an operator took it over) is left to a later round, and the others are
// advanced; the error then says how many failed, and the first failure.
func (o *Orchestrator[Tx]) RunOnce(ctx context.Context) (int, error) {
	var ids []string
	err := o.db.InTx(ctx, func(tx Tx) (err error) {
		ids, err = rowscan.Strings(ctx, o.db.Querier(tx), o.q.poll, append([]any{o.cfg.Now().UnixNano()}, o.names...)...)
		return err
	})
	if err != nil {
		return 0, &idem.BackendError{Backend: "saga", Op: "poll", Err: err}
	}
	done, err := isolate.Each(ctx, ids, func(id string) (bool, error) { return o.advance(ctx, id) })
	var ie *isolate.Error
	if errors.As(err, &ie) {
		return done, fmt.Errorf("saga: %d of %d due sagas could not be advanced, and are tried again in a later round (the others were); the first: %w",
			ie.Failed, ie.Of, ie.First)
	}
	return done, err
}

// queries are the orchestrator's statements that name its definitions: it polls
// and leases only the sagas it can run, so that orchestrators of different
// versions can share a database, and a saga of a name none of them defines
// (another team's row) waits, Running, instead of failing every round.
type queries struct {
	poll, lease string
}

// newQueries returns s's statements for n definitions' names, built once; their
// placeholders come after the statement's own (one for poll, three for lease).
func newQueries(s *idemsql.SagaSQL, n int) queries {
	return queries{poll: s.Poll(n, pollBatch), lease: s.Lease(n)}
}

// definedNames returns the names of defs, sorted, as statement arguments.
func definedNames(defs map[string]*Definition) (args []any) {
	names := slices.Sorted(maps.Keys(defs))
	for _, n := range names {
		args = append(args, n)
	}
	return args
}

// Get returns saga id, or ok false if there is none. A saga whose row cannot be
// decoded is an error that says what cannot be (Admin.Get shows such a saga).
func (o *Orchestrator[Tx]) Get(ctx context.Context, id string) (inst Instance, ok bool, err error) {
	err = o.db.InTx(ctx, func(tx Tx) error {
		var rerr error
		inst, _, rerr = o.read(ctx, o.db.Querier(tx), id)
		return rerr
	})
	if err != nil {
		if errors.Is(err, sql.ErrNoRows) { // pgx.ErrNoRows matches it too
			return Instance{}, false, nil
		}
		return Instance{}, false, &idem.BackendError{Backend: "saga", Op: "get", Err: err}
	}
	return inst, true, nil
}

// List returns up to limit sagas in state (all states if empty; Parked for the
// parked ones), oldest first. A saga whose row cannot be decoded is listed with
// its DecodeError, and what could be read of it.
func (o *Orchestrator[Tx]) List(ctx context.Context, state string, limit int) ([]Instance, error) {
	if limit <= 0 {
		limit = 100
	}
	stmt, args := o.stmts.IDs, []any{state, limit}
	if state == Parked {
		stmt, args = o.stmts.ParkedIDs, []any{parkedAt, limit}
	}
	var out []Instance
	err := o.db.InTx(ctx, func(tx Tx) error {
		out = nil
		q := o.db.Querier(tx)
		ids, err := rowscan.Strings(ctx, q, stmt, args...)
		if err != nil {
			return err
		}
		for _, id := range ids {
			row, err := readSagaRow(ctx, q, o.stmts.Read, id)
			if err != nil {
				return err
			}
			out = append(out, row.Instance)
		}
		return nil
	})
	if err != nil {
		return nil, &idem.BackendError{Backend: "saga", Op: "list", Err: err}
	}
	return out, nil
}
