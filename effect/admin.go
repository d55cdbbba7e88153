package effect

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/internal/cursor"
	"github.com/idemhq/idem/internal/rowscan"
	"github.com/idemhq/idem/migrate"
)

// Admin is the operator's view of the effects table: what the admin API, the
// console and `idem sagas show` (a saga's steps) show, and what `idem sagas purge
// --effects` deletes. It needs only the database, not the Fence or the calls, so
// any process can run it.
type Admin[Tx any] struct {
	db  idemsql.TxDB[Tx]
	q   *idemsql.EffectSQL // the driver's statements
	now func() time.Time
}

// NewAdmin returns an Admin on db. It changes no schema: it fails with a
// *migrate.BehindError if idem_effects lacks a migration (run `idem migrate up`, or
// start a Fence, which applies them).
func NewAdmin[Tx any](ctx context.Context, db idemsql.TxDB[Tx]) (*Admin[Tx], error) {
	if err := db.Validate(); err != nil {
		return nil, err
	}
	if err := migrate.Require(ctx, db, migrate.Effect); err != nil {
		return nil, err
	}
	return &Admin[Tx]{db: db, q: db.Driver.Effect(), now: time.Now}, nil
}

// EffectFilter selects the effects Admin.List returns. The zero value (with a
// Limit) lists every effect.
type EffectFilter struct {
	// State is StatePending, StateFailed, or "" for every state.
	State string
	// PastLease keeps only PENDING effects whose lease has passed: those Recover (or
	// the next Do) would take over. It implies State StatePending.
	PastLease bool
	// Key, if set, keeps only this key's effects (a saga's steps: its id).
	Key string
	// Cursor is "" for the first page, then the Next of the previous page.
	Cursor string
	// Limit is the page size, 1 to idem.MaxListLimit.
	Limit int
}

// EffectPage is one page of Admin.List.
type EffectPage struct {
	// Effects are in (key, step) order, without their Result (which may be large:
	// Get returns it).
	Effects []Effect
	// Next is the cursor of the following page, "" after the last.
	Next string
}

// List returns a page of the effects f selects; an effect whose row cannot be
// decoded is listed with its DecodeError. Each page is an index range scan:
// by primary key, or for a State by the index of open effects (migration
// 002_state_index), never a scan of the complete effects.
func (a *Admin[Tx]) List(ctx context.Context, f EffectFilter) (EffectPage, error) {
	if err := cursor.Limit(f.Limit); err != nil {
		return EffectPage{}, err
	}
	if f.PastLease && f.State == "" {
		f.State = StatePending
	}
	switch {
	case f.State != "" && f.State != StatePending && f.State != StateFailed:
		return EffectPage{}, &idem.InputError{Field: "State", Reason: fmt.Sprintf("is %q", f.State),
			Fix: fmt.Sprintf("use %q, %q, or \"\" for every state", StatePending, StateFailed)}
	case f.PastLease && f.State != StatePending:
		return EffectPage{}, &idem.InputError{Field: "PastLease", Reason: "is set with State " + f.State,
			Fix: "only pending effects have a lease: set State pending or leave it empty"}
	}
	if f.Key != "" {
		if err := (idem.Key{Scope: "effect", ID: f.Key}).Validate(); err != nil {
			return EffectPage{}, err
		}
	}
	after, err := cursor.Decode(f.Cursor, 2)
	if err != nil {
		return EffectPage{}, err
	}
	q, args := a.listQuery(f, after)
	var page EffectPage
	err = a.db.InTx(ctx, func(tx Tx) error {
		effects, err := idemsql.Collect(ctx, a.db.Querier(tx), q, args, func(r idemsql.Rows) (Effect, error) { return scanEffect(r, false) })
		page = EffectPage{Effects: effects}
		return err
	})
	if err != nil {
		return EffectPage{}, &idem.BackendError{Backend: "effect", Op: "list", Err: err}
	}
	if len(page.Effects) > f.Limit {
		page.Effects = page.Effects[:f.Limit]
		last := page.Effects[f.Limit-1]
		page.Next = cursor.Encode(last.Key, last.Step)
	}
	return page, nil
}

// listQuery is the statement of f's page after the row after (nil: the first
// page), and its arguments in EffectSQL.List's order.
func (a *Admin[Tx]) listQuery(f EffectFilter, after []string) (string, []any) {
	var args []any
	if f.State != "" {
		args = append(args, f.State)
	}
	if f.PastLease {
		args = append(args, a.now().UnixNano())
	}
	if f.Key != "" {
		args = append(args, f.Key)
	}
	if after != nil {
		args = append(args, after[0], after[1])
	}
	return a.q.List(f.State != "", f.PastLease, f.Key != "", after != nil), append(args, f.Limit+1)
}

// Get returns the effect of key and step with its result, or an error wrapping
// idem.ErrNotFound. An effect whose row cannot be decoded is returned with its
// DecodeError.
func (a *Admin[Tx]) Get(ctx context.Context, key, step string) (Effect, error) {
	if err := validate(key, step); err != nil {
		return Effect{}, err
	}
	var e Effect
	err := a.db.InTx(ctx, func(tx Tx) error {
		// Query, not QueryRow: rowscan.Scan may read the row twice.
		rows, err := a.db.Querier(tx).Query(ctx, a.q.Get, key, step)
		if err != nil {
			return err
		}
		defer rows.Close()
		if !rows.Next() {
			return cmp.Or(rows.Err(), sql.ErrNoRows)
		}
		e, err = scanEffect(rows, true)
		return err
	})
	if errors.Is(err, sql.ErrNoRows) { // pgx.ErrNoRows matches it too
		return Effect{}, fmt.Errorf("effect %s/%s: %w", key, step, idem.ErrNotFound)
	}
	if err != nil {
		return Effect{}, &idem.BackendError{Backend: "effect", Op: "get", Err: err}
	}
	return e, nil
}

// effectNames names the columns scanEffect reads, for decode errors.
var effectNames = []string{"key", "step", "state", "token", "attempts", "reason", "lease_until", "created_at", "updated_at", "result"}

// scanEffect reads the columns of EffectSQL.List, and the result after them if
// withResult (EffectSQL.Get). A value
// that does not fit its field is named in the Effect's DecodeError when row can be
// read again (the *sql.Rows of a Query); otherwise it is the error.
func scanEffect(row idemsql.Row, withResult bool) (Effect, error) {
	var e Effect
	var until, created, updated int64
	dest := []any{&e.Key, &e.Step, &e.State, &e.Token, &e.Attempts, &e.Reason, &until, &created, &updated}
	if withResult {
		dest = append(dest, &e.Result)
	}
	bad, err := rowscan.Scan(row, effectNames, dest...)
	if err != nil {
		return Effect{}, err
	}
	e.LeaseUntil, e.Created, e.Updated, e.DecodeError = time.Unix(0, until), time.Unix(0, created), time.Unix(0, updated), bad
	return e, nil
}
