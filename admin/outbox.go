package admin

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/admin/view"
)

// Outbox is the outbox and relay area. Retry and Discard return an error matching
// idem.ErrNotFound for an id that is not a parked message.
type Outbox interface {
	Status(ctx context.Context) (OutboxStatus, error)
	// Parked returns up to limit parked messages, oldest first, after cursor.
	Parked(ctx context.Context, cursor string, limit int) (ParkedPage, error)
	// Retry puts a parked message back for the relay to publish.
	Retry(ctx context.Context, id int64) error
	Discard(ctx context.Context, id int64, reason string) error
}

// OutboxStatus is the relay's backlog at a glance.
type OutboxStatus struct {
	Partitions []OutboxPartition `json:"partitions"`
	Parked     int64             `json:"parked"`
	// Discarded counts the parked messages an operator gave up on, kept for audit.
	Discarded int64         `json:"discarded"`
	Relays    []RelayStatus `json:"relays"`
}

// OutboxPartition is the unpublished backlog of one topic (and partition, where
// the relay publishes per partition).
type OutboxPartition struct {
	Topic     string `json:"topic"`
	Partition string `json:"partition,omitempty"`
	Backlog   int64  `json:"backlog"`
	// OldestAgeSeconds is the age of the oldest unpublished message, 0 without one.
	OldestAgeSeconds float64 `json:"oldest_age_seconds"`
	Parked           int64   `json:"parked"`
	Discarded        int64   `json:"discarded"`
}

// RelayStatus is one relay instance.
type RelayStatus struct {
	Instance  string    `json:"instance"`
	LastRound time.Time `json:"last_round,omitzero"`
	Published int64     `json:"published"`
	Host      string    `json:"host,omitempty"`
	PID       int64     `json:"pid,omitempty"`
	StartedAt time.Time `json:"started_at,omitzero"`
	// PollIntervalSeconds is the relay's poll interval.
	PollIntervalSeconds float64 `json:"poll_interval_seconds,omitempty"`
	// LastError is the last round's error, "" when it succeeded.
	LastError string `json:"last_error,omitempty"`
	// Stale says the relay has not reported for a few poll intervals: it stopped,
	// hangs, or cannot reach the database.
	Stale bool `json:"stale"`
}

// ParkedMessage is a message the relay gave up on, as the operator view declares
// it. The API lists it without its headers.
type ParkedMessage = view.ParkedMessage

// ParkedPage is a page of Outbox.Parked.
type ParkedPage struct {
	Messages []ParkedMessage
	Next     string // "" after the last page
}

func serveOutbox(h *handler, r *http.Request, c *call) (any, error) {
	st, err := h.cfg.Outbox.Status(r.Context())
	if err != nil {
		return nil, err
	}
	if st.Partitions == nil {
		st.Partitions = []OutboxPartition{}
	}
	if st.Relays == nil {
		st.Relays = []RelayStatus{}
	}
	return st, nil
}

func serveParked(h *handler, r *http.Request, c *call) (any, error) {
	q, err := parseQuery(r)
	if err != nil {
		return nil, err
	}
	cursor, limit, err := q.page()
	if err != nil {
		return nil, err
	}
	full, err := fullFlag(r, c)
	if err != nil {
		return nil, err
	}
	page, err := h.cfg.Outbox.Parked(r.Context(), cursor, limit)
	if err != nil {
		return nil, err
	}
	out := struct {
		Messages []view.ParkedView `json:"messages"`
		Next     string            `json:"next"`
	}{viewsOf(page.Messages, func(m ParkedMessage) view.ParkedView {
		m.Headers = nil
		return m.View(full)
	}), page.Next}
	return out, nil
}

func serveRetryParked(h *handler, r *http.Request, c *call) (any, error) {
	id, _, err := idAndReason(r, c)
	if err != nil {
		return nil, err
	}
	return parkedDone(id, h.cfg.Outbox.Retry(r.Context(), id))
}

func serveDiscardParked(h *handler, r *http.Request, c *call) (any, error) {
	id, why, err := idAndReason(r, c)
	if err != nil {
		return nil, err
	}
	return parkedDone(id, h.cfg.Outbox.Discard(r.Context(), id, why))
}

func parkedDone(id int64, err error) (any, error) {
	if errors.Is(err, idem.ErrNotFound) {
		return nil, notFound("no parked message with id %d", id)
	} else if err != nil {
		return nil, err
	}
	return done(id), nil
}
