package admin

import (
	"context"
	"errors"
	"log/slog"
	"net/http"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/admin/view"
)

// Effects lists effects that need a look: pending past their lease (their holder
// died or hangs) or failed.
type Effects interface {
	List(ctx context.Context, f EffectFilter) (EffectPage, error)
}

// Effect is one effect of the fence, as the operator view declares it.
type Effect = view.Effect

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

// The sagas, as the operator view declares them.
type (
	Saga           = view.Saga
	SagaStep       = view.SagaStep
	SagaDetail     = view.SagaDetail
	SagaResolution = view.SagaResolution
)

// SagaPage is a page of Sagas.List.
type SagaPage struct {
	Sagas []Saga `json:"sagas"`
	Next  string `json:"next"`
}

// listByState answers a list filtered by state (EffectFilter, SagaFilter): it
// reads ?state= (one of states, or none for all) and the page (?cursor=, ?limit=),
// and asks list for it.
func listByState[F ~struct {
	State  string
	Cursor string
	Limit  int
}, P any](r *http.Request, list func(context.Context, F) (P, error), states ...string) (page P, err error) {
	q, err := parseQuery(r)
	if err != nil {
		return page, err
	}
	var f struct {
		State  string
		Cursor string
		Limit  int
	}
	if f.State, err = q.oneOf("state", states...); err != nil {
		return page, err
	}
	if f.Cursor, f.Limit, err = q.page(); err != nil {
		return page, err
	}
	return list(r.Context(), F(f))
}

func serveEffects(h *handler, r *http.Request, c *call) (any, error) {
	page, err := listByState(r, h.cfg.Effects.List, EffectPendingPastLease, EffectFailed)
	if page.Effects == nil {
		page.Effects = []Effect{}
	}
	return page, err
}

func serveSagas(h *handler, r *http.Request, c *call) (any, error) {
	page, err := listByState(r, h.cfg.Sagas.List, sagaStates...)
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
	var req reasonRequest
	return changeSaga(r, c, &req, "reason", &req.Reason, h.cfg.Sagas.RetryStep)
}

func serveResolveSaga(h *handler, r *http.Request, c *call) (any, error) {
	var req noteRequest
	return changeSaga(r, c, &req, "note", &req.Note, h.cfg.Sagas.Resolve)
}

// changeSaga reads the {id} of a saga and the body req, whose field (text) is
// the required reason or note, and runs change with them.
func changeSaga(r *http.Request, c *call, req any, field string, text *string, change func(ctx context.Context, id, text string) error) (any, error) {
	id, err := pathName(r)
	if err != nil {
		return nil, err
	}
	c.target = []any{slog.String("id", id)}
	if err := decode(r, req); err != nil {
		return nil, err
	}
	if err := reason(c, field, *text); err != nil {
		return nil, err
	}
	if err := change(r.Context(), id, *text); err != nil {
		return nil, sagaError(id, err)
	}
	return done(id), nil
}
