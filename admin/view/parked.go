package view

import (
	"time"

	"github.com/idemhq/idem/outbox"
)

// ParkedMessage is a message the outbox's relay gave up on.
type ParkedMessage struct {
	ID          int64     `json:"id"`
	MessageID   string    `json:"message_id"`
	Topic       string    `json:"topic"`
	OrderingKey string    `json:"ordering_key"`
	Attempts    int       `json:"attempts"`
	LastError   string    `json:"last_error"`
	ParkedAt    time.Time `json:"parked_at,omitzero"`
	// DiscardedAt and DiscardReason are set once an operator discarded it: it is
	// then never published, and kept for audit.
	DiscardedAt   time.Time `json:"discarded_at,omitzero"`
	DiscardReason string    `json:"discard_reason,omitempty"`
	// Headers are the message's headers, which the CLI shows (the admin API's
	// list does not).
	Headers map[string]string `json:"headers,omitempty"`
	Payload []byte            `json:"-"`
	// DecodeError says what of the stored row could not be decoded (headers that
	// are not a JSON object of strings, written by another service): the message is
	// shown with what could be read.
	DecodeError string `json:"decode_error,omitempty"`
}

// ParkedOf is the view of the outbox's parked message.
func ParkedOf(p outbox.Parked) ParkedMessage {
	return ParkedMessage{ID: p.ID, MessageID: p.Message.ID, Topic: p.Message.Topic, OrderingKey: p.Message.OrderingKey,
		Attempts: p.Attempts, LastError: p.LastError, ParkedAt: p.ParkedAt, Headers: p.Message.Headers,
		Payload: p.Message.Payload, DiscardedAt: p.DiscardedAt, DiscardReason: p.DiscardReason, DecodeError: p.DecodeError}
}

// ParkedView is a ParkedMessage as it is written out: its payload as a Preview.
type ParkedView struct {
	ParkedMessage
	Payload Preview `json:"payload"`
}

// View is m written out, its payload previewed (full: with the whole of it).
func (m ParkedMessage) View(full bool) ParkedView {
	return ParkedView{m, NewPreview(m.Payload, full)}
}

// StateText is the message's state for a table: parked, or discarded and why.
func (m ParkedMessage) StateText() string {
	if m.DiscardedAt.IsZero() {
		return "parked"
	}
	return "discarded: " + Cell(m.DiscardReason, 40)
}
