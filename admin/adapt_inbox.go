package admin

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/admin/view"
	"github.com/idemhq/idem/inbox"
)

// DeadLettersFrom returns the DeadLetters area of a's database. List shows the open
// letters (pending or replay requested); Get shows any. Replay only *requests* the
// replays (OutcomeRequested): the letter's running inbox.Consumer performs each,
// exactly once, at its next poll, and Get then shows State "replayed".
func DeadLettersFrom[Tx any](a *inbox.DeadLetterAdmin[Tx]) DeadLetters {
	return deadLetters[Tx]{a}
}

type deadLetters[Tx any] struct{ a *inbox.DeadLetterAdmin[Tx] }

func (d deadLetters[Tx]) List(ctx context.Context, f DeadLetterFilter) (DeadLetterPage, error) {
	after, err := decodeIDCursor(f.Cursor)
	if err != nil {
		return DeadLetterPage{}, err
	}
	limit := f.Limit
	if limit <= 0 {
		limit = DefaultLimit
	}
	list, err := d.a.List(ctx, inbox.DeadLetterFilter{Consumer: f.Consumer, Kind: f.Kind, ReasonContains: f.ReasonContains,
		Since: f.Since, Until: f.Until, AfterID: after, Limit: limit})
	if err != nil {
		return DeadLetterPage{}, err
	}
	var page DeadLetterPage
	page.DeadLetters, page.Next = idPage(list, limit, func(dl inbox.DeadLetter) int64 { return dl.ID }, view.DeadLetterOf)
	return page, nil
}

func (d deadLetters[Tx]) Get(ctx context.Context, id int64) (DeadLetter, error) {
	dl, err := d.a.Get(ctx, id)
	if errors.Is(err, inbox.ErrNoDeadLetter) {
		return DeadLetter{}, fmt.Errorf("dead letter %d: %w", id, idem.ErrNotFound)
	} else if err != nil {
		return DeadLetter{}, err
	}
	return view.DeadLetterOf(dl), nil
}

func (d deadLetters[Tx]) Replay(ctx context.Context, ids []int64, reason string) ([]ReplayResult, error) {
	reqs, err := d.a.RequestReplay(ctx, ids, reason)
	if err != nil {
		return nil, err
	}
	out := make([]ReplayResult, len(reqs))
	for i, r := range reqs {
		out[i] = ReplayResult{ID: r.ID, Outcome: OutcomeError, Detail: r.Outcome}
		switch r.Outcome {
		case inbox.ReplayRequested:
			out[i] = ReplayResult{ID: r.ID, Outcome: OutcomeRequested}
		case inbox.ReplayNotFound:
			out[i] = ReplayResult{ID: r.ID, Outcome: OutcomeNotFound}
		case inbox.ReplayAlreadyDone:
			out[i] = ReplayResult{ID: r.ID, Outcome: OutcomeAlreadyDone, Detail: "it was replayed or discarded already"}
		}
	}
	return out, nil
}

func (d deadLetters[Tx]) Discard(ctx context.Context, id int64, reason string) error {
	err := d.a.Discard(ctx, id, reason)
	switch {
	case errors.Is(err, inbox.ErrNoDeadLetter):
		return fmt.Errorf("dead letter %d: %w", id, idem.ErrNotFound)
	case errors.Is(err, inbox.ErrDeadLetterClosed):
		return fmt.Errorf("dead letter %d was replayed or discarded already: %w", id, ErrConflict)
	}
	return err
}

// encodeIDCursor and decodeIDCursor are the cursors of the areas that page by
// row id (dead letters, parked messages): the decimal last id of the page.
func encodeIDCursor(id int64) string { return strconv.FormatInt(id, 10) }

func decodeIDCursor(c string) (int64, error) {
	if c == "" {
		return 0, nil
	}
	id, err := strconv.ParseInt(c, 10, 64)
	if err != nil || id < 1 || strconv.FormatInt(id, 10) != c {
		return 0, &idem.InputError{Field: "cursor", Reason: fmt.Sprintf("is %q, not a cursor this API returned", view.Clean(c, 32)),
			Fix: "pass the next of the previous page, or nothing for the first page"}
	}
	return id, nil
}
