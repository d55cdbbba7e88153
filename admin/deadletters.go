package admin

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/admin/view"
)

// DeadLetters is the inbox's dead-letter area. Get and Discard return an error
// matching idem.ErrNotFound for an unknown id.
type DeadLetters interface {
	List(ctx context.Context, f DeadLetterFilter) (DeadLetterPage, error)
	Get(ctx context.Context, id int64) (DeadLetter, error)
	// Replay puts the dead letters back to be processed (or asks their consumer
	// to: OutcomeRequested), one outcome per id in the order given; reason is the
	// operator's, for the backend's record.
	Replay(ctx context.Context, ids []int64, reason string) ([]ReplayResult, error)
	Discard(ctx context.Context, id int64, reason string) error
}

// DeadLetterFilter selects dead letters; zero fields select all.
type DeadLetterFilter struct {
	Consumer       string
	Kind           string // permanent, max_attempts, no_key, key_reused, or a refusal (stale_key, deadline…)
	ReasonContains string
	Since, Until   time.Time // DeadAt in [Since, Until)
	Cursor         string    // "" for the first page
	Limit          int       // 1 to MaxLimit
}

// DeadLetter is one message the inbox gave up on, as the operator view declares it.
type DeadLetter = view.DeadLetter

// Bounds on the headers a dead letter's view shows.
const (
	MaxHeaders     = view.MaxHeaders
	MaxHeaderValue = view.MaxHeaderValue
)

// DeadLetterPage is a page of DeadLetters.List.
type DeadLetterPage struct {
	DeadLetters []DeadLetter
	Next        string // "" after the last page
}

// Outcomes of a replay.
const (
	OutcomeReplayed       = "replayed"
	OutcomeRequested      = "requested"       // its consumer will replay it, exactly once, at its next poll
	OutcomeAlreadyApplied = "already_applied" // its key was completed meanwhile: nothing to do
	OutcomeAlreadyDone    = "already_done"    // it was replayed or discarded already
	OutcomeNotFound       = "not_found"
	OutcomeError          = "error" // Detail says why
)

// ReplayResult is the outcome of replaying one dead letter.
type ReplayResult struct {
	ID      int64  `json:"id"`
	Outcome string `json:"outcome"` // one of the Outcome… constants
	Detail  string `json:"detail,omitempty"`
}

// MaxReplayIDs bounds the ids of one replay.
const MaxReplayIDs = 1000

func serveDeadLetters(h *handler, r *http.Request, c *call) (any, error) {
	q, err := parseQuery(r)
	if err != nil {
		return nil, err
	}
	var f DeadLetterFilter
	for _, p := range []struct {
		dst  *string
		name string
	}{{&f.Consumer, "consumer"}, {&f.Kind, "kind"}, {&f.ReasonContains, "reason"}} {
		if *p.dst, err = q.text(p.name, 255); err != nil {
			return nil, err
		}
	}
	if f.Since, err = q.time("since"); err != nil {
		return nil, err
	}
	if f.Until, err = q.time("until"); err != nil {
		return nil, err
	}
	if !f.Since.IsZero() && !f.Until.IsZero() && !f.Since.Before(f.Until) {
		return nil, invalid("until", "is not after since: swap them or widen the range")
	}
	if f.Cursor, f.Limit, err = q.page(); err != nil {
		return nil, err
	}
	page, err := h.cfg.DeadLetters.List(r.Context(), f)
	if err != nil {
		return nil, err
	}
	out := struct {
		DeadLetters []view.DeadLetterView `json:"deadletters"`
		Next        string                `json:"next"`
	}{viewsOf(page.DeadLetters, func(d DeadLetter) view.DeadLetterView {
		d.Headers = nil // GET /api/deadletters/{id} shows them
		return d.View(false)
	}), page.Next}
	return out, nil
}

func serveDeadLetter(h *handler, r *http.Request, c *call) (any, error) {
	id, err := pathID(r)
	if err != nil {
		return nil, err
	}
	full, err := fullFlag(r, c)
	if err != nil {
		return nil, err
	}
	d, err := h.cfg.DeadLetters.Get(r.Context(), id)
	if errors.Is(err, idem.ErrNotFound) {
		return nil, notFound("no dead letter with id %d", id)
	} else if err != nil {
		return nil, err
	}
	d.Headers = view.BoundHeaders(d.Headers)
	return d.View(full), nil
}

// fullFlag reads ?full=1, which only the full-access token may send.
func fullFlag(r *http.Request, c *call) (bool, error) {
	q, err := parseQuery(r)
	if err != nil {
		return false, err
	}
	full, err := q.flag("full")
	if full && !c.full() {
		return false, refusedRead("full=1 shows stored payloads: use the full-access token")
	}
	return full, err
}

type replayRequest struct {
	IDs    []int64 `json:"ids"`
	Reason string  `json:"reason"`
}

func serveReplay(h *handler, r *http.Request, c *call) (any, error) {
	var req replayRequest
	if err := decode(r, &req); err != nil {
		return nil, err
	}
	if len(req.IDs) <= MaxReplayIDs {
		c.target = []any{slog.Any("ids", req.IDs)}
	} else {
		c.target = []any{slog.Int("ids_count", len(req.IDs))}
	}
	if err := reason(c, "reason", req.Reason); err != nil {
		return nil, err
	}
	switch {
	case len(req.IDs) == 0:
		return nil, invalid("ids", "is empty: list the dead letters to replay")
	case len(req.IDs) > MaxReplayIDs:
		return nil, invalid("ids", "has %d ids: replay at most %d at a time", len(req.IDs), MaxReplayIDs)
	}
	seen := make(map[int64]bool, len(req.IDs))
	for _, id := range req.IDs {
		if id < 1 {
			return nil, invalid("ids", "has %d: ids are positive integers", id)
		}
		if seen[id] {
			return nil, invalid("ids", "has %d twice: list each id once", id)
		}
		seen[id] = true
	}
	res, err := h.cfg.DeadLetters.Replay(r.Context(), req.IDs, req.Reason)
	if err != nil {
		return nil, err
	}
	return struct {
		Results []ReplayResult `json:"results"`
	}{res}, nil
}

type reasonRequest struct {
	Reason string `json:"reason"`
}

func serveDiscardDeadLetter(h *handler, r *http.Request, c *call) (any, error) {
	id, why, err := idAndReason(r, c)
	if err != nil {
		return nil, err
	}
	if err := h.cfg.DeadLetters.Discard(r.Context(), id, why); errors.Is(err, idem.ErrNotFound) {
		return nil, notFound("no dead letter with id %d", id)
	} else if err != nil {
		return nil, err
	}
	return done(id), nil
}

// idAndReason reads the {id} path parameter and the {reason} body of a mutation
// on one item, recording both for the audit.
func idAndReason(r *http.Request, c *call) (int64, string, error) {
	id, err := pathID(r)
	if err != nil {
		return 0, "", err
	}
	c.target = []any{slog.Int64("id", id)}
	var req reasonRequest
	if err := decode(r, &req); err != nil {
		return 0, "", err
	}
	return id, req.Reason, reason(c, "reason", req.Reason)
}

// Done is the answer to a mutation on one item that succeeded.
type Done struct {
	ID any  `json:"id"`
	OK bool `json:"ok"`
}

func done(id any) Done { return Done{ID: id, OK: true} }
