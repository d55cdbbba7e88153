package admin

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"time"

	"github.com/idemhq/idem"
)

// Effects lists effects that need a look: pending past their lease (their holder
// died or hangs) or failed.
type Effects interface {
	List(ctx context.Context, f EffectFilter) (EffectPage, error)
}

// Effect states EffectFilter selects.
const (
	EffectPendingPastLease = "pending_past_lease"
	EffectFailed           = "failed"
)

// EffectFilter selects effects. State is EffectPendingPastLease, EffectFailed, or
// "" for both.
type EffectFilter struct {
	State  string
	Cursor string
	Limit  int
}

// Effect is one effect of the fence.
type Effect struct {
	Key        string    `json:"key"`
	Step       string    `json:"step,omitempty"` // the effect's step within its key (a saga's "do:<step>")
	State      string    `json:"state"`
	Attempts   int       `json:"attempts"`
	Error      string    `json:"error,omitempty"`
	LeaseUntil time.Time `json:"lease_until,omitzero"`
	CreatedAt  time.Time `json:"created_at,omitzero"`
	UpdatedAt  time.Time `json:"updated_at,omitzero"`
	// DecodeError says what of the stored row could not be decoded (on SQLite, text
	// where a number belongs): the effect is shown with what could be read.
	DecodeError string `json:"decode_error,omitempty"`
}

// EffectPage is a page of Effects.List.
type EffectPage struct {
	Effects []Effect `json:"effects"`
	Next    string   `json:"next"`
}

// Sagas is the saga area. Get, RetryStep and Resolve return an error matching
// idem.ErrNotFound for an unknown id, and one matching ErrConflict (with a message
// saying why) for a saga whose state does not allow the action.
type Sagas interface {
	List(ctx context.Context, f SagaFilter) (SagaPage, error)
	Get(ctx context.Context, id string) (SagaDetail, error)
	// RetryStep runs the failed step (or compensation) of a saga again.
	RetryStep(ctx context.Context, id, reason string) error
	// Resolve marks a failed saga as settled by hand, with a note of what was done.
	Resolve(ctx context.Context, id, note string) error
}

// Saga states SagaFilter selects (those of effect/saga), and SagaParked.
var sagaStates = []string{"running", "compensating", "completed", "compensated", "failed", "resolved", SagaParked}

// SagaParked is not a state but what SagaFilter.State selects for the running and
// compensating sagas an orchestrator set aside (Saga.Parked).
const SagaParked = "parked"

// SagaFilter selects sagas; State "" selects all.
type SagaFilter struct {
	State  string
	Cursor string
	Limit  int
}

// Saga is one saga instance.
type Saga struct {
	ID        string    `json:"id"`
	Name      string    `json:"name"`
	State     string    `json:"state"`
	Step      int       `json:"step"`
	Attempts  int       `json:"attempts"`
	Reason    string    `json:"reason,omitempty"`
	CreatedAt time.Time `json:"created_at,omitzero"`
	UpdatedAt time.Time `json:"updated_at,omitzero"`
	// DecodeError says what of the stored row could not be decoded (results that
	// are not a JSON object, written by another service): the saga is shown with
	// what could be read. It can be resolved, or retried once its row is corrected.
	DecodeError string `json:"decode_error,omitempty"`
	// Parked marks a running or compensating saga an orchestrator set aside, as
	// it cannot run it (its row cannot be decoded, or its step is unknown):
	// Reason says why. No orchestrator advances it until it is retried (once its
	// row is corrected) or resolved.
	Parked bool `json:"parked,omitempty"`
}

// SagaStep is one step of a saga, as SagaDetail shows it.
type SagaStep struct {
	Name     string `json:"name"`
	State    string `json:"state"`
	Attempts int    `json:"attempts"`
	Error    string `json:"error,omitempty"`
	// DecodeError says what of the step's effect row could not be decoded.
	DecodeError string `json:"decode_error,omitempty"`
}

// SagaDetail is a saga with its steps.
type SagaDetail struct {
	Saga
	Steps []SagaStep `json:"steps"`
	// NextAt is when an orchestrator may next advance it (after a backoff), left
	// out for a parked saga; LeaseUntil, if in the future, is how long an
	// orchestrator holds it.
	NextAt     time.Time `json:"next_at,omitzero"`
	LeaseUntil time.Time `json:"lease_until,omitzero"`
	// Resolution is set once the saga was resolved by hand (state resolved).
	Resolution *SagaResolution `json:"resolution,omitempty"`
}

// SagaResolution records how a saga was resolved by hand.
type SagaResolution struct {
	Note          string    `json:"note"`
	At            time.Time `json:"at"`
	PreviousState string    `json:"previous_state"` // its state when it was resolved
}

// SagaPage is a page of Sagas.List.
type SagaPage struct {
	Sagas []Saga `json:"sagas"`
	Next  string `json:"next"`
}

func serveEffects(h *handler, r *http.Request, c *call) (any, error) {
	q, err := parseQuery(r)
	if err != nil {
		return nil, err
	}
	var f EffectFilter
	if f.State, err = q.oneOf("state", EffectPendingPastLease, EffectFailed); err != nil {
		return nil, err
	}
	if f.Cursor, err = q.cursor(); err != nil {
		return nil, err
	}
	if f.Limit, err = q.limit(); err != nil {
		return nil, err
	}
	page, err := h.cfg.Effects.List(r.Context(), f)
	if page.Effects == nil {
		page.Effects = []Effect{}
	}
	return page, err
}

func serveSagas(h *handler, r *http.Request, c *call) (any, error) {
	q, err := parseQuery(r)
	if err != nil {
		return nil, err
	}
	var f SagaFilter
	if f.State, err = q.oneOf("state", sagaStates...); err != nil {
		return nil, err
	}
	if f.Cursor, err = q.cursor(); err != nil {
		return nil, err
	}
	if f.Limit, err = q.limit(); err != nil {
		return nil, err
	}
	page, err := h.cfg.Sagas.List(r.Context(), f)
	if page.Sagas == nil {
		page.Sagas = []Saga{}
	}
	return page, err
}

func serveSaga(h *handler, r *http.Request, c *call) (any, error) {
	id, err := pathName(r)
	if err != nil {
		return nil, err
	}
	s, err := h.cfg.Sagas.Get(r.Context(), id)
	if err != nil {
		return nil, sagaError(id, err)
	}
	if s.Steps == nil {
		s.Steps = []SagaStep{}
	}
	return s, nil
}

func sagaError(id string, err error) error {
	if errors.Is(err, idem.ErrNotFound) {
		return notFound("no saga with id %q", id)
	}
	return err
}

type noteRequest struct {
	Note string `json:"note"`
}

func serveRetrySaga(h *handler, r *http.Request, c *call) (any, error) {
	id, err := pathName(r)
	if err != nil {
		return nil, err
	}
	c.target = []any{slog.String("id", id)}
	var req reasonRequest
	if err := decode(r, &req); err != nil {
		return nil, err
	}
	if err := reason(c, "reason", req.Reason); err != nil {
		return nil, err
	}
	if err := h.cfg.Sagas.RetryStep(r.Context(), id, req.Reason); err != nil {
		return nil, sagaError(id, err)
	}
	return done(id), nil
}

func serveResolveSaga(h *handler, r *http.Request, c *call) (any, error) {
	id, err := pathName(r)
	if err != nil {
		return nil, err
	}
	c.target = []any{slog.String("id", id)}
	var req noteRequest
	if err := decode(r, &req); err != nil {
		return nil, err
	}
	if err := reason(c, "note", req.Note); err != nil {
		return nil, err
	}
	if err := h.cfg.Sagas.Resolve(r.Context(), id, req.Note); err != nil {
		return nil, sagaError(id, err)
	}
	return done(id), nil
}
