// Package isolate runs a loop's work item by item so that one item that fails
// affects itself only: the items after it still run, and the loop learns how many
// failed and why the first did. The orchestrator's rounds (effect/saga) and the
// fence's recovery (effect) run their batches through it.
package isolate

import (
	"context"
	"fmt"
)

// Each calls fn for each of items, in order, going past the ones that fail, until
// ctx ends (then it returns at once, with ctx's error). It returns how many fn
// reported done, and nil or an *Error counting the failures.
func Each[T any](ctx context.Context, items []T, fn func(T) (bool, error)) (done int, err error) {
	var e Error
	for _, it := range items {
		ok, ferr := fn(it)
		switch {
		case ctx.Err() != nil:
			return done, ctx.Err()
		case ferr != nil:
			e.Failed++
			if e.First == nil {
				e.First = ferr
			}
		case ok:
			done++
		}
	}
	if e.Failed > 0 {
		e.Of = len(items)
		return done, &e
	}
	return done, nil
}

// Error is a batch in which Failed of Of items failed; it wraps the first failure.
type Error struct {
	Failed, Of int
	First      error
}

func (e *Error) Error() string {
	return fmt.Sprintf("%d of %d failed; the first: %v", e.Failed, e.Of, e.First)
}

func (e *Error) Unwrap() error { return e.First }
