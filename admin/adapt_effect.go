package admin

import (
	"context"
	"errors"
	"strings"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/admin/view"
	"github.com/idemhq/idem/effect"
	"github.com/idemhq/idem/effect/saga"
)

// EffectsFrom returns the Effects area of a's database. With no state it lists
// the failed effects, then those pending past their lease; its cursor says which
// of the two it is in.
func EffectsFrom[Tx any](a *effect.Admin[Tx]) Effects { return effectsArea[Tx]{a} }

type effectsArea[Tx any] struct{ a *effect.Admin[Tx] }

// The phases of a listing of both states, as its cursor's prefix.
const (
	phaseFailed  = EffectFailed + ":"
	phasePending = EffectPendingPastLease + ":"
)

func (e effectsArea[Tx]) List(ctx context.Context, f EffectFilter) (EffectPage, error) {
	if f.Limit <= 0 {
		f.Limit = DefaultLimit
	}
	if f.State != "" {
		return e.list(ctx, f.State, f.Cursor, f.Limit)
	}
	phase, inner := phaseFailed, ""
	switch {
	case f.Cursor == "":
	case strings.HasPrefix(f.Cursor, phaseFailed):
		inner = strings.TrimPrefix(f.Cursor, phaseFailed)
	case strings.HasPrefix(f.Cursor, phasePending):
		phase, inner = phasePending, strings.TrimPrefix(f.Cursor, phasePending)
	default:
		return EffectPage{}, &idem.InputError{Field: "cursor", Reason: "is not a cursor this API returned",
			Fix: "pass the next of the previous page, or nothing for the first page"}
	}
	if phase == phasePending {
		page, err := e.list(ctx, EffectPendingPastLease, inner, f.Limit)
		if page.Next != "" {
			page.Next = phasePending + page.Next
		}
		return page, err
	}
	page, err := e.list(ctx, EffectFailed, inner, f.Limit)
	if err != nil {
		return EffectPage{}, err
	}
	if page.Next != "" {
		page.Next = phaseFailed + page.Next
		return page, nil
	}
	// The failed ones are done: fill the page with the first pending ones.
	rest := f.Limit - len(page.Effects)
	if rest == 0 {
		page.Next = phasePending
		return page, nil
	}
	more, err := e.list(ctx, EffectPendingPastLease, "", rest)
	if err != nil {
		return EffectPage{}, err
	}
	page.Effects = append(page.Effects, more.Effects...)
	if more.Next != "" {
		page.Next = phasePending + more.Next
	}
	return page, nil
}

func (e effectsArea[Tx]) list(ctx context.Context, state, cursor string, limit int) (EffectPage, error) {
	f := effect.EffectFilter{State: effect.StateFailed, Cursor: cursor, Limit: limit}
	if state == EffectPendingPastLease {
		f = effect.EffectFilter{PastLease: true, Cursor: cursor, Limit: limit}
	}
	page, err := e.a.List(ctx, f)
	if err != nil {
		return EffectPage{}, err
	}
	return EffectPage{Effects: viewsOf(page.Effects, view.EffectOf), Next: page.Next}, nil
}

// SagasFrom returns the Sagas area of a's database. A retry or resolve that the
// saga's state refuses (a *saga.StateError), or that races an orchestrator
// advancing the saga, answers 409.
func SagasFrom[Tx any](a *saga.Admin[Tx]) Sagas { return sagasArea[Tx]{a} }

type sagasArea[Tx any] struct{ a *saga.Admin[Tx] }

func (s sagasArea[Tx]) List(ctx context.Context, f SagaFilter) (SagaPage, error) {
	if f.Limit <= 0 {
		f.Limit = DefaultLimit
	}
	page, err := s.a.List(ctx, f.State, f.Cursor, f.Limit)
	if err != nil {
		return SagaPage{}, err
	}
	return SagaPage{Sagas: viewsOf(page.Sagas, view.SagaOf), Next: page.Next}, nil
}

func (s sagasArea[Tx]) Get(ctx context.Context, id string) (SagaDetail, error) {
	d, err := s.a.Get(ctx, id)
	if err != nil {
		return SagaDetail{}, err
	}
	return view.SagaDetailOf(d), nil
}

func (s sagasArea[Tx]) RetryStep(ctx context.Context, id, reason string) error {
	return sagaConflict(s.a.RetryStep(ctx, id, reason))
}

func (s sagasArea[Tx]) Resolve(ctx context.Context, id, note string) error {
	return sagaConflict(s.a.Resolve(ctx, id, note))
}

// sagaConflict makes ErrConflict of what saga.Admin's changes return for a saga
// whose state refuses the change: a *saga.StateError, or the error of a saga an
// orchestrator changed meanwhile (the only one that is neither of the others).
func sagaConflict(err error) error {
	var ie *idem.InputError
	var be *idem.BackendError
	if err == nil || errors.Is(err, idem.ErrNotFound) || errors.As(err, &ie) || errors.As(err, &be) ||
		errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return conflictError{err}
}

// conflictError is an area's error that answers 409 with its message.
type conflictError struct{ err error }

func (c conflictError) Error() string        { return c.err.Error() }
func (c conflictError) Unwrap() error        { return c.err }
func (c conflictError) Is(target error) bool { return target == ErrConflict }
