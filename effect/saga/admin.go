package saga

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/effect"
	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/internal/cursor"
	"github.com/idemhq/idem/internal/rowscan"
	"github.com/idemhq/idem/migrate"
)

// ErrNotFound is what Admin's methods return, wrapped, for a saga id that does
// not exist. It is idem.ErrNotFound, so errors.Is matches either.
var ErrNotFound = idem.ErrNotFound

// StateError is Admin.RetryStep or Resolve refusing a saga whose state makes the
// action meaningless (retrying a completed saga, resolving it twice).
type StateError struct {
	ID, State string
	Op        string // "retry" or "resolve"
	Fix       string
}

func (e *StateError) Error() string {
	return fmt.Sprintf("saga %s is %s: cannot %s it: %s", e.ID, e.State, e.Op, e.Fix)
}

// MaxNoteLen bounds the reason of RetryStep and the note of Resolve.
const MaxNoteLen = 1024

// Admin is the operator's view of the sagas: list, inspect, retry a failed or
// stuck step, resolve by hand. It needs only the database (not the definitions),
// so the admin API and `idem sagas` run it in any process; the orchestrators
// that run the sagas need not be stopped.
type Admin[Tx any] struct {
	db      idemsql.TxDB[Tx]
	effects *effect.Admin[Tx]
	stmts   *idemsql.SagaSQL // the driver's statements
	now     func() time.Time
}

// NewAdmin returns an Admin on db. It changes no schema: it fails with a
// *migrate.BehindError if idem_sagas or idem_effects lacks a migration (run `idem
// migrate up`, or start an Orchestrator, which applies them).
func NewAdmin[Tx any](ctx context.Context, db idemsql.TxDB[Tx]) (*Admin[Tx], error) {
	if err := db.Validate(); err != nil {
		return nil, err
	}
	if err := migrate.Require(ctx, db, migrate.Saga); err != nil {
		return nil, err
	}
	effects, err := effect.NewAdmin(ctx, db)
	if err != nil {
		return nil, err
	}
	return &Admin[Tx]{db: db, effects: effects, stmts: db.Driver.Saga(), now: time.Now}, nil
}

// Page is one page of Admin.List.
type Page struct {
	// Sagas are in id order, without their Data and Results (Get has them).
	Sagas []Instance
	// Next is the cursor of the following page, "" after the last.
	Next string
}

var states = []string{Running, Compensating, Completed, Compensated, Failed, Resolved}

// List returns up to limit (1 to idem.MaxListLimit) sagas in state ("" for every
// state, Parked for the parked ones) in id order, after cursor ("" for the first
// page, then a page's Next). A saga whose row cannot be decoded is listed with its
// DecodeError. Each page is an index range scan: the primary key, or (state, id);
// the parked ones are read from the index of due sagas.
func (a *Admin[Tx]) List(ctx context.Context, state, cur string, limit int) (Page, error) {
	if err := cursor.Limit(limit); err != nil {
		return Page{}, err
	}
	if state != "" && state != Parked && !containsState(state) {
		return Page{}, &idem.InputError{Field: "state", Reason: fmt.Sprintf("is %q", state),
			Fix: "use one of " + strings.Join(states, ", ") + `, "" for every state, or parked for the parked sagas`}
	}
	after, err := cursor.Decode(cur, 1)
	if err != nil {
		return Page{}, err
	}
	var args []any
	switch state {
	case "":
	case Parked:
		args = append(args, parkedAt)
	default:
		args = append(args, state)
	}
	if after != nil {
		args = append(args, after[0])
	}
	args = append(args, limit+1)
	q := a.stmts.List(state != "" && state != Parked, state == Parked, after != nil)
	var page Page
	err = a.db.InTx(ctx, func(tx Tx) error {
		page = Page{}
		return idemsql.EachRow(ctx, a.db.Querier(tx), q, args, func(rows idemsql.Rows) (err error) {
			var inst Instance
			var created, updated, next int64
			inst.DecodeError, err = rowscan.Scan(rows, listColumns, &inst.ID, &inst.Saga, &inst.State, &inst.Step,
				&inst.Attempts, &inst.Reason, &created, &updated, &next)
			inst.Created, inst.Updated, inst.Parked = time.Unix(0, created), time.Unix(0, updated), next == parkedAt
			page.Sagas = append(page.Sagas, inst)
			return err
		})
	})
	if err != nil {
		return Page{}, &idem.BackendError{Backend: "saga", Op: "list", Err: err}
	}
	page.Sagas, page.Next = cursor.Trim(page.Sagas, limit, func(i Instance) []string { return []string{i.ID} })
	return page, nil
}

// listColumns names the columns List reads, for decode errors.
var listColumns = []string{"id", "saga", "state", "step", "attempts", "reason", "created_at", "updated_at", "next_at"}

func containsState(s string) bool {
	for _, st := range states {
		if st == s {
			return true
		}
	}
	return false
}

// Detail is one saga as Admin.Get shows it.
type Detail struct {
	Instance
	// NextAt is when an orchestrator may next advance it (after a backoff), zero
	// for a parked saga; LeaseUntil, if in the future, is how long an orchestrator
	// holds it.
	NextAt, LeaseUntil time.Time
	// Effects are its steps as the fence recorded them, in step order by name: each
	// action ("do:<step>") and compensation ("undo:<step>") that ran, with its
	// state, attempts and reason (up to idem.MaxListLimit of them).
	Effects []effect.Effect
	// Resolution is set once the saga was resolved by hand (nil if its record is
	// missing). What of it cannot be decoded is in DecodeError.
	Resolution *Resolution
}

// Resolution records Admin.Resolve.
type Resolution struct {
	Note          string
	At            time.Time
	PreviousState string // the state the saga was in when it was resolved
}

// Get returns saga id with its steps' effects, or an error wrapping ErrNotFound. A
// saga whose row (or resolution) cannot be decoded is returned with its
// DecodeError, an effect with its own.
func (a *Admin[Tx]) Get(ctx context.Context, id string) (Detail, error) {
	if err := (idem.Key{Scope: "saga", ID: id}).Validate(); err != nil {
		return Detail{}, err
	}
	var d Detail
	err := a.db.InTx(ctx, func(tx Tx) error {
		d = Detail{}
		q := a.db.Querier(tx)
		row, err := readSagaRow(ctx, q, a.stmts.Read, id)
		if err != nil {
			return err
		}
		d.Instance, d.NextAt, d.LeaseUntil = row.Instance, time.Unix(0, row.nextAt), time.Unix(0, row.leaseUntil)
		if row.Parked {
			d.NextAt = time.Time{}
		}
		if row.State != Resolved {
			return nil
		}
		return readResolution(ctx, q, a.stmts.ReadResolution, &d)
	})
	if errors.Is(err, sql.ErrNoRows) { // pgx.ErrNoRows matches it too
		return Detail{}, fmt.Errorf("saga %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return Detail{}, &idem.BackendError{Backend: "saga", Op: "get", Err: err}
	}
	effects, err := a.effects.List(ctx, effect.EffectFilter{Key: id, Limit: idem.MaxListLimit})
	if err != nil {
		return Detail{}, err
	}
	d.Effects = effects.Effects
	return d, nil
}

// resolutionColumns names the columns readResolution reads, for decode errors.
var resolutionColumns = []string{"resolution.note", "resolution.resolved_at", "resolution.previous_state"}

// readResolution sets d.Resolution from idem_saga_resolutions (stmt is
// SagaSQL.ReadResolution), and adds what of it cannot be decoded to d.DecodeError.
func readResolution(ctx context.Context, q idemsql.Querier, stmt string, d *Detail) error {
	// Query, not QueryRow: rowscan.Scan may read the row twice.
	rows, err := q.Query(ctx, stmt, d.ID)
	if err != nil {
		return err
	}
	defer rows.Close()
	if !rows.Next() {
		return rows.Err()
	}
	var r Resolution
	var at int64
	bad, err := rowscan.Scan(rows, resolutionColumns, &r.Note, &at, &r.PreviousState)
	if err != nil {
		return err
	}
	r.At, d.Resolution = time.Unix(0, at), &r
	d.DecodeError = rowscan.Join(d.DecodeError, bad)
	return rows.Err()
}

// RetryStep makes the orchestrators run saga id's current step again, now: its
// attempts are reset, its backoff and lease cleared, and any orchestrator
// advancing it is fenced out (its next save fails with idem.ErrLeaseLost). A
// Failed saga (a compensation failed permanently) goes back to Compensating, and
// the failed compensation's effect back to PENDING, so it is called again with the
// same derived idempotency key: a downstream that stored its failed answer under
// that key will answer the same, so fix the cause first. A Running or
// Compensating saga (waiting out a backoff, or parked once its row is corrected)
// keeps its state, and goes on from its current step. Completed,
// Compensated and Resolved sagas, and a saga whose row cannot be decoded (its
// DecodeError: no orchestrator can run it; resolve it instead), are refused with a
// *StateError; an unknown id gets an error wrapping ErrNotFound. reason (required,
// at most MaxNoteLen bytes) is appended to the saga's Reason.
func (a *Admin[Tx]) RetryStep(ctx context.Context, id, reason string) error {
	if err := checkNote(id, "reason", reason); err != nil {
		return err
	}
	return a.change(ctx, id, "retry", func(q idemsql.Querier, inst Instance, token int64, now int64) error {
		next := inst.State
		switch {
		case inst.State == Completed || inst.State == Compensated || inst.State == Resolved:
			return &StateError{ID: id, State: inst.State, Op: "retry", Fix: "only a failed saga, or one still running or compensating, has a step to retry"}
		case inst.DecodeError != "":
			return &StateError{ID: id, State: inst.State, Op: "retry",
				Fix: "its row cannot be decoded (" + inst.DecodeError + "), so no orchestrator can run it: correct the row, or resolve the saga by hand"}
		case inst.State == Failed:
			next = Compensating
			// Only the compensation that failed: a Failed saga has exactly one
			// failed undo effect, as its first one ends it.
			if _, err := q.Exec(ctx, a.stmts.RetryUndo, now, id); err != nil {
				return err
			}
		}
		addReason(&inst, fmt.Sprintf("retried by hand at %s: %s", time.Unix(0, now).UTC().Format(time.RFC3339), reason))
		return a.update(ctx, q, a.stmts.Retry, id, inst.State, token, next, now, inst.Reason)
	})
}

// Resolve marks saga id as resolved by hand (a person compensated it, or decided
// nothing is owed): it becomes Resolved, a terminal state no orchestrator advances,
// and any orchestrator advancing it now is fenced out (its next save fails with
// idem.ErrLeaseLost; a call it is making may still complete downstream). note
// (required, at most MaxNoteLen bytes) is recorded with the time and the previous
// state (Detail.Resolution). Running, Compensating and Failed sagas can be
// resolved; the others get a *StateError, an unknown id an error wrapping
// ErrNotFound.
func (a *Admin[Tx]) Resolve(ctx context.Context, id, note string) error {
	if err := checkNote(id, "note", note); err != nil {
		return err
	}
	return a.change(ctx, id, "resolve", func(q idemsql.Querier, inst Instance, token int64, now int64) error {
		switch inst.State {
		case Completed, Compensated, Resolved:
			return &StateError{ID: id, State: inst.State, Op: "resolve", Fix: "it has ended already; only a running, compensating or failed saga can be resolved"}
		}
		if _, err := q.Exec(ctx, a.stmts.InsertResolution, id, inst.State, note, now); err != nil {
			return err
		}
		return a.update(ctx, q, a.stmts.Resolve, id, inst.State, token, Resolved)
	})
}

// change runs fn on saga id's row, locked (PostgreSQL, MySQL) or in SQLite's
// single-writer transaction.
func (a *Admin[Tx]) change(ctx context.Context, id, op string, fn func(q idemsql.Querier, inst Instance, token, now int64) error) error {
	err := idemsql.RetrySerializationFailures(ctx, func() error {
		return a.db.InTx(ctx, func(tx Tx) error {
			q := a.db.Querier(tx)
			row, err := readSagaRow(ctx, q, a.stmts.ReadForUpdate, id)
			if err != nil {
				return err
			}
			return fn(q, row.Instance, row.token, a.now().UnixNano())
		})
	})
	var se *StateError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &se):
		return se
	case errors.Is(err, sql.ErrNoRows):
		return fmt.Errorf("saga %s: %w", id, ErrNotFound)
	case errors.Is(err, errChanged):
		return fmt.Errorf("saga %s: %w", id, err)
	}
	return &idem.BackendError{Backend: "saga", Op: op, Err: err}
}

var errChanged = errors.New("changed while being updated (an orchestrator advanced it): look at it again and retry")

// update runs stmt (SagaSQL.Retry or Resolve) with args on saga id, which clears
// its lease and takes the next token, if it is still in state under token.
func (a *Admin[Tx]) update(ctx context.Context, q idemsql.Querier, stmt, id, state string, token int64, args ...any) error {
	args = append(args, a.now().UnixNano(), id, state, token)
	m, err := q.Exec(ctx, stmt, args...)
	if err != nil {
		return err
	}
	if m != 1 {
		return errChanged
	}
	return nil
}

func checkNote(id, field, text string) error {
	if err := (idem.Key{Scope: "saga", ID: id}).Validate(); err != nil {
		return err
	}
	switch {
	case strings.TrimSpace(text) == "":
		return &idem.InputError{Field: field, Reason: "is empty", Fix: "say why, for whoever looks at this saga next"}
	case len(text) > MaxNoteLen:
		return &idem.InputError{Field: field, Reason: fmt.Sprintf("is %d bytes long", len(text)), Fix: fmt.Sprintf("keep it to %d bytes", MaxNoteLen)}
	case !utf8.ValidString(text) || strings.ContainsRune(text, 0):
		return &idem.InputError{Field: field, Reason: "holds invalid UTF-8 or a NUL byte", Fix: "write it as UTF-8 text without NUL bytes"}
	}
	return nil
}
