package view

import (
	"time"

	"github.com/idemhq/idem/effect"
	"github.com/idemhq/idem/effect/saga"
)

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

// EffectOf is the view of the fence's effect.
func EffectOf(e effect.Effect) Effect {
	return Effect{Key: e.Key, Step: e.Step, State: e.State, Attempts: e.Attempts, Error: e.Reason,
		LeaseUntil: orZero(e.LeaseUntil), CreatedAt: e.Created, UpdatedAt: e.Updated, DecodeError: e.DecodeError}
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

// SagaOf is the view of the saga instance.
func SagaOf(in saga.Instance) Saga {
	return Saga{ID: in.ID, Name: in.Saga, State: in.State, Step: in.Step, Attempts: in.Attempts,
		Reason: in.Reason, CreatedAt: in.Created, UpdatedAt: in.Updated, DecodeError: in.DecodeError, Parked: in.Parked}
}

// StateText is the saga's state for a table, marked when it is parked.
func (s Saga) StateText() string {
	if s.Parked {
		return Cell(s.State, 20) + " (parked)"
	}
	return Cell(s.State, 20)
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

// SagaDetailOf is the view of the saga's detail.
func SagaDetailOf(d saga.Detail) SagaDetail {
	out := SagaDetail{Saga: SagaOf(d.Instance), NextAt: orZero(d.NextAt), LeaseUntil: orZero(d.LeaseUntil),
		Steps: make([]SagaStep, 0, len(d.Effects))}
	for _, e := range d.Effects {
		out.Steps = append(out.Steps, SagaStep{Name: e.Step, State: e.State, Attempts: e.Attempts, Error: e.Reason, DecodeError: e.DecodeError})
	}
	if r := d.Resolution; r != nil {
		out.Resolution = &SagaResolution{Note: r.Note, At: r.At, PreviousState: r.PreviousState}
	}
	return out
}

// EffectView is an Effect written out with a preview of its stored result, as
// `idem sagas show` lists a saga's steps.
type EffectView struct {
	Effect
	Result Preview `json:"result"`
}

// EffectViewOf is the view of e with its result previewed (full: whole).
func EffectViewOf(e effect.Effect, full bool) EffectView {
	return EffectView{EffectOf(e), NewPreview(e.Result, full)}
}
