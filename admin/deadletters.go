package admin

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/idemhq/idem"
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

// DeadLetter is one message the inbox gave up on.
type DeadLetter struct {
	ID        int64     `json:"id"`
	Consumer  string    `json:"consumer"`
	MessageID string    `json:"message_id"`
	Topic     string    `json:"topic"`
	Position  string    `json:"position"` // where it was in the broker
	Kind      string    `json:"kind"`
	Reason    string    `json:"reason"`
	Attempts  int       `json:"attempts"`
	FirstAt   time.Time `json:"first_at,omitzero"`
	DeadAt    time.Time `json:"dead_at,omitzero"`

	// The operator's part, where the backend keeps it (inbox.DeadLetterAdmin):
	// State is pending, replay_requested, replayed or discarded.
	State             string    `json:"state,omitempty"`
	ReplayRequestedAt time.Time `json:"replay_requested_at,omitzero"`
	ReplayReason      string    `json:"replay_reason,omitempty"`
	ReplayAttempts    int       `json:"replay_attempts,omitempty"` // failed tries of the requested replay
	LastReplayError   string    `json:"last_replay_error,omitempty"`
	ReplayNote        string    `json:"replay_note,omitempty"` // "applied" or "already applied"
	ReplayedAt        time.Time `json:"replayed_at,omitzero"`
	DiscardedAt       time.Time `json:"discarded_at,omitzero"`
	DiscardReason     string    `json:"discard_reason,omitempty"`

	// Headers are the message's broker headers, shown by GET /api/deadletters/{id}
	// (not in lists), each value cut to MaxHeaderValue bytes, at most MaxHeaders.
	Headers map[string]string `json:"headers,omitempty"`
	// Payload is shown as a Preview, never whole unless asked for.
	Payload []byte `json:"-"`

	// DecodeError says what of the stored row could not be decoded (headers that
	// are not a JSON object of strings, written by another service): the letter is
	// shown with what could be read. It can be discarded, not replayed.
	DecodeError string `json:"decode_error,omitempty"`
}

// Bounds on the headers a dead letter's view shows.
const (
	MaxHeaders     = 64
	MaxHeaderValue = 256
)

// boundHeaders keeps at most MaxHeaders headers (by name order), values cut to
// MaxHeaderValue bytes on a rune boundary.
func boundHeaders(h map[string]string) map[string]string {
	if len(h) == 0 {
		return nil
	}
	out := make(map[string]string, min(len(h), MaxHeaders))
	for _, k := range slices.Sorted(maps.Keys(h)) {
		if len(out) == MaxHeaders {
			break
		}
		v := h[k]
		if len(v) > MaxHeaderValue {
			v = strings.ToValidUTF8(v[:MaxHeaderValue], "") + "…"
		}
		out[k] = v
	}
	return out
}

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

type deadLetterView struct {
	DeadLetter
	Payload Preview `json:"payload"`
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
	if f.Cursor, err = q.cursor(); err != nil {
		return nil, err
	}
	if f.Limit, err = q.limit(); err != nil {
		return nil, err
	}
	page, err := h.cfg.DeadLetters.List(r.Context(), f)
	if err != nil {
		return nil, err
	}
	out := struct {
		DeadLetters []deadLetterView `json:"deadletters"`
		Next        string           `json:"next"`
	}{make([]deadLetterView, 0, len(page.DeadLetters)), page.Next}
	for _, d := range page.DeadLetters {
		d.Headers = nil // GET /api/deadletters/{id} shows them
		out.DeadLetters = append(out.DeadLetters, deadLetterView{d, preview(d.Payload, false)})
	}
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
	d.Headers = boundHeaders(d.Headers)
	return deadLetterView{d, preview(d.Payload, full)}, nil
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
