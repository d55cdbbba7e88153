package saga

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/internal/isolate"
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
		ids, err = selectIDs(ctx, o.db.Querier(tx), o.q.poll, append([]any{o.cfg.Now().UnixNano()}, o.names...)...)
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

// newQueries returns the statements for definitions names; their placeholders
// come after the statement's own (one for poll, three for lease).
func newQueries(names []string) queries {
	in := func(from int) string {
		if len(names) == 0 {
			return "1 = 0"
		}
		p := make([]string, len(names))
		for i := range names {
			p[i] = fmt.Sprintf("$%d", from+i)
		}
		return "saga IN (" + strings.Join(p, ", ") + ")"
	}
	return queries{
		poll: `SELECT id FROM idem_sagas WHERE state IN ('running', 'compensating')
			AND next_at <= $1 AND lease_until <= $1 AND ` + in(2) + fmt.Sprintf(` ORDER BY next_at LIMIT %d`, pollBatch),
		lease: `UPDATE idem_sagas SET lease_until = $1, token = token + 1
			WHERE id = $2 AND state IN ('running', 'compensating') AND lease_until <= $3 AND next_at <= $3 AND ` + in(4),
	}
}

// definedNames returns the names of defs, sorted, as statement arguments.
func definedNames(defs map[string]*Definition) (names []string, args []any) {
	for name := range defs {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, n := range names {
		args = append(args, n)
	}
	return names, args
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
	where, args := `$1 = '' OR state = $1`, []any{state, limit}
	if state == Parked {
		where, args = parkedWhere(1), []any{parkedAt, limit}
	}
	var out []Instance
	err := o.db.InTx(ctx, func(tx Tx) error {
		out = nil
		q := o.db.Querier(tx)
		ids, err := selectIDs(ctx, q, `SELECT id FROM idem_sagas WHERE `+where+` ORDER BY created_at, id LIMIT $2`, args...)
		if err != nil {
			return err
		}
		for _, id := range ids {
			row, err := readSagaRow(ctx, q, id, "")
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

// selectIDs runs query, which selects one text column, and returns its values.
func selectIDs(ctx context.Context, q idemsql.Querier, query string, args ...any) ([]string, error) {
	rows, err := q.Query(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	return ids, rows.Err()
}
