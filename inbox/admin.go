package inbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemsql"
)

// The states of a dead letter (DeadLetter.State).
const (
	StatePending         = "pending"          // waiting for an operator
	StateReplayRequested = "replay_requested" // its consumer replays it at its next poll
	StateReplayed        = "replayed"         // applied by a replay, or found applied already
	StateDiscarded       = "discarded"        // closed by an operator, kept for audit
)

// The outcomes of RequestReplay for one id (ReplayRequest.Outcome).
const (
	ReplayRequested   = "requested"    // the letter's consumer will replay it
	ReplayNotFound    = "not_found"    // no dead letter has this id
	ReplayAlreadyDone = "already_done" // it was replayed or discarded already
)

// Bounds on what an operator passes in.
const (
	// MaxListLimit bounds DeadLetterFilter.Limit.
	MaxListLimit = 1000
	// MaxRequestIDs bounds the ids of one RequestReplay.
	MaxRequestIDs = 1000
	// MaxReasonBytes bounds the reasons of RequestReplay and Discard, and
	// DeadLetterFilter.ReasonContains.
	MaxReasonBytes = 1024
)

// ErrDeadLetterClosed is returned by Discard for a dead letter already replayed or
// discarded.
var ErrDeadLetterClosed = errors.New("inbox: the dead letter was already replayed or discarded")

// DeadLetterAdmin is the operator's view of the dead letters of every consumer of a
// database: it lists, shows, discards and requests replays, from any process, with
// the database alone. It never runs a handler: a requested replay is performed by
// the letter's consumer (Consumer.Run polls for requests), exactly once.
type DeadLetterAdmin[Tx any] struct {
	db  idemsql.TxDB[Tx]
	sql *idemsql.InboxSQL // nil where db has no Driver: every method then returns db.Validate's error
}

// NewDeadLetterAdmin returns the admin of db's dead letters. The schema must be up
// to date (a Consumer's New, or `idem migrate up`, applies it).
func NewDeadLetterAdmin[Tx any](db idemsql.TxDB[Tx]) *DeadLetterAdmin[Tx] {
	a := &DeadLetterAdmin[Tx]{db: db}
	if db.Driver != nil {
		a.sql = db.Driver.Inbox()
	}
	return a
}

// ready returns the error of a TxDB without a Driver, which has no statements.
func (a *DeadLetterAdmin[Tx]) ready() error {
	if a.sql == nil {
		return a.db.Validate()
	}
	return nil
}

// DeadLetterFilter selects dead letters for List. The zero value lists the first
// 100 open (pending or replay-requested) letters of every consumer.
type DeadLetterFilter struct {
	Consumer       string    // only this consumer's letters, if set
	Kind           string    // permanent, max_attempts, no_key, key_reused or a refusal (stale_key, deadline…), if set
	ReasonContains string    // case-insensitive substring of the reason, if set
	Since, Until   time.Time // dead at or after Since, before Until, where set
	AfterID        int64     // keyset: only ids above it (the last id of the previous page)
	Limit          int       // at most this many, 1 to MaxListLimit; 0 means 100
	IncludeDone    bool      // also replayed and discarded letters
}

// ReplayRequest is the outcome of RequestReplay for one id.
type ReplayRequest struct {
	ID      int64
	Outcome string // ReplayRequested, ReplayNotFound or ReplayAlreadyDone
}

// List returns the dead letters filter selects, in id order: pass the last id as
// AfterID for the next page. A letter whose row cannot be decoded is listed with
// its DecodeError.
func (a *DeadLetterAdmin[Tx]) List(ctx context.Context, f DeadLetterFilter) ([]DeadLetter, error) {
	if err := a.ready(); err != nil {
		return nil, err
	}
	if err := f.validate(); err != nil {
		return nil, err
	}
	conds, args := f.conds()
	query := a.sql.ListDeadLetters(conds)
	var out []DeadLetter
	err := read(ctx, a.db, func(q idemsql.Querier) (err error) {
		out, err = queryDeadLetters(ctx, q, query, args...)
		return err
	})
	if err != nil {
		return nil, &idem.BackendError{Backend: a.db.Dialect().String(), Op: "inbox.list_dead_letters", Err: err}
	}
	return out, nil
}

// conds returns the conditions of f and their arguments, in the order of
// idemsql.InboxSQL.ListDeadLetters.
func (f DeadLetterFilter) conds() (c idemsql.DeadLetterConds, args []any) {
	add := func(cond *bool, arg any) {
		*cond = true
		args = append(args, arg)
	}
	if f.Consumer != "" {
		add(&c.Consumer, f.Consumer)
	}
	if f.Kind != "" {
		add(&c.Kind, f.Kind)
	}
	if f.ReasonContains != "" {
		add(&c.Reason, "%"+likeEscape(strings.ToLower(f.ReasonContains))+"%")
	}
	if !f.Since.IsZero() {
		add(&c.Since, f.Since.UnixMilli())
	}
	if !f.Until.IsZero() {
		add(&c.Until, f.Until.UnixMilli())
	}
	c.IncludeDone = f.IncludeDone
	limit := f.Limit
	if limit == 0 {
		limit = 100
	}
	return c, append(args, f.AfterID, limit)
}

func (f DeadLetterFilter) validate() error {
	switch {
	case f.Limit < 0 || f.Limit > MaxListLimit:
		return &idem.InputError{Field: "DeadLetterFilter.Limit", Reason: fmt.Sprintf("must be 0 to %d (got %d)", MaxListLimit, f.Limit),
			Fix: "page with AfterID instead of asking for more at once"}
	case f.AfterID < 0:
		return &idem.InputError{Field: "DeadLetterFilter.AfterID", Reason: "is negative", Fix: "pass 0, or the last id of the previous page"}
	case len(f.Consumer) > 255 || len(f.Kind) > 255:
		return &idem.InputError{Field: "DeadLetterFilter.Consumer", Reason: "or Kind is longer than 255 bytes", Fix: "pass a consumer name and a kind as the dead letters show them"}
	case len(f.ReasonContains) > MaxReasonBytes:
		return &idem.InputError{Field: "DeadLetterFilter.ReasonContains", Reason: fmt.Sprintf("is longer than %d bytes (got %d)", MaxReasonBytes, len(f.ReasonContains)),
			Fix: "search for a shorter part of the reason"}
	case !f.Since.IsZero() && !f.Until.IsZero() && !f.Until.After(f.Since):
		return &idem.InputError{Field: "DeadLetterFilter.Until", Reason: "is not after Since", Fix: "swap them, or leave one unset"}
	}
	return nil
}

// likeEscape escapes LIKE's metacharacters with '!', the ESCAPE character of
// ListDeadLetters (a backslash would be a string escape on MySQL).
func likeEscape(s string) string {
	return strings.NewReplacer("!", "!!", "%", "!%", "_", "!_").Replace(s)
}

// Get returns dead letter id, in whatever state (with its DecodeError if its row
// cannot be decoded), or ErrNoDeadLetter.
func (a *DeadLetterAdmin[Tx]) Get(ctx context.Context, id int64) (DeadLetter, error) {
	var dl DeadLetter
	if err := a.ready(); err != nil {
		return dl, err
	}
	err := read(ctx, a.db, func(q idemsql.Querier) (err error) {
		dl, err = getDeadLetter(ctx, q, a.sql.DeadLetter, id)
		return err
	})
	if errors.Is(err, sql.ErrNoRows) {
		return dl, ErrNoDeadLetter
	}
	if err != nil {
		return dl, &idem.BackendError{Backend: a.db.Dialect().String(), Op: "inbox.get_dead_letter", Err: err}
	}
	return dl, nil
}

// RequestReplay asks the consumer of each dead letter in ids to replay it, with
// reason recorded. The consumer's Run performs the replay at its next poll
// (Config.ReplayPollInterval), exactly once, through the same path as
// Consumer.Replay. Requesting again resets the count of failed tries. The outcome
// of each id is returned in the order of ids.
func (a *DeadLetterAdmin[Tx]) RequestReplay(ctx context.Context, ids []int64, reason string) ([]ReplayRequest, error) {
	switch {
	case len(ids) == 0 || len(ids) > MaxRequestIDs:
		return nil, &idem.InputError{Field: "ids", Reason: fmt.Sprintf("must hold 1 to %d ids (got %d)", MaxRequestIDs, len(ids)),
			Fix: "request replays in batches"}
	case len(reason) > MaxReasonBytes:
		return nil, reasonTooLong("reason", reason)
	}
	if err := a.ready(); err != nil {
		return nil, err
	}
	out := make([]ReplayRequest, len(ids))
	for i, id := range ids {
		out[i].ID = id
		err := a.db.InTx(ctx, func(tx Tx) error {
			q := a.db.Querier(tx)
			consumer, closed, err := a.lockLetter(ctx, q, id)
			switch {
			case errors.Is(err, ErrNoDeadLetter):
				out[i].Outcome = ReplayNotFound
				return nil
			case err != nil:
				return err
			case closed:
				out[i].Outcome = ReplayAlreadyDone
				return nil
			}
			out[i].Outcome = ReplayRequested
			_, err = q.Exec(ctx, a.sql.RequestReplay, id, consumer, time.Now().UnixMilli(), reason)
			return err
		})
		if err != nil {
			return out[:i], &idem.BackendError{Backend: a.db.Dialect().String(), Op: "inbox.request_replay", Err: err}
		}
	}
	return out, nil
}

// Discard closes dead letter id without applying it: it is no longer pending, is
// never replayed, and stays, with reason (required), for audit. It returns
// ErrNoDeadLetter for an unknown id and ErrDeadLetterClosed for a letter already
// replayed or discarded.
func (a *DeadLetterAdmin[Tx]) Discard(ctx context.Context, id int64, reason string) error {
	switch {
	case strings.TrimSpace(reason) == "":
		return &idem.InputError{Field: "reason", Reason: "is empty", Fix: "say why the message is dropped: it is kept with the dead letter for audit"}
	case len(reason) > MaxReasonBytes:
		return reasonTooLong("reason", reason)
	}
	if err := a.ready(); err != nil {
		return err
	}
	err := a.db.InTx(ctx, func(tx Tx) error {
		q := a.db.Querier(tx)
		consumer, closed, err := a.lockLetter(ctx, q, id)
		if err != nil {
			return err
		}
		if closed {
			return ErrDeadLetterClosed
		}
		now := time.Now().UnixMilli()
		// Closed as a replay closes it: out of the pending letters and their unique index.
		if _, err := q.Exec(ctx, a.sql.CloseDeadLetter, now, id); err != nil {
			return err
		}
		_, err = q.Exec(ctx, a.sql.DiscardDeadLetter, id, consumer, now, reason)
		return err
	})
	if err != nil && !errors.Is(err, ErrNoDeadLetter) && !errors.Is(err, ErrDeadLetterClosed) {
		return &idem.BackendError{Backend: a.db.Dialect().String(), Op: "inbox.discard_dead_letter", Err: err}
	}
	return err
}

// lockLetter locks dead letter id's row (InboxSQL.LockDeadLetter) and returns its consumer and whether
// it is closed (replayed or discarded).
func (a *DeadLetterAdmin[Tx]) lockLetter(ctx context.Context, q idemsql.Querier, id int64) (consumer string, closed bool, err error) {
	var replayed *int64
	err = q.QueryRow(ctx, a.sql.LockDeadLetter, id).Scan(&consumer, &replayed)
	if errors.Is(err, sql.ErrNoRows) {
		return "", false, ErrNoDeadLetter
	}
	return consumer, replayed != nil, err
}

func reasonTooLong(field, reason string) error {
	return &idem.InputError{Field: field, Reason: fmt.Sprintf("is longer than %d bytes (got %d)", MaxReasonBytes, len(reason)),
		Fix: "keep it to a sentence; link to a ticket for more"}
}

func queryDeadLetters(ctx context.Context, q idemsql.Querier, query string, args ...any) ([]DeadLetter, error) {
	return idemsql.Collect(ctx, q, query, args, func(r idemsql.Rows) (DeadLetter, error) { return scanDeadLetter(r) })
}

// getDeadLetter returns the one dead letter query selects, or sql.ErrNoRows. It
// reads through Query, not QueryRow: scanDeadLetter may read a row twice.
func getDeadLetter(ctx context.Context, q idemsql.Querier, query string, args ...any) (DeadLetter, error) {
	dls, err := queryDeadLetters(ctx, q, query, args...)
	if err != nil {
		return DeadLetter{}, err
	}
	if len(dls) == 0 {
		return DeadLetter{}, sql.ErrNoRows
	}
	return dls[0], nil
}

// read runs fn outside a transaction where db can (on SQLite a transaction would
// take the write lock), and in one otherwise.
func read[Tx any](ctx context.Context, db idemsql.TxDB[Tx], fn func(q idemsql.Querier) error) error {
	if db.Read != nil {
		return db.Read(ctx, fn)
	}
	return db.InTx(ctx, func(tx Tx) error { return fn(db.Querier(tx)) })
}
