package view

import (
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/idemhq/idem/inbox"
)

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

	// Headers are the message's broker headers. The admin API shows them, bounded
	// (BoundHeaders), on GET /api/deadletters/{id} only, not in lists.
	Headers map[string]string `json:"headers,omitempty"`
	// Payload is shown as a Preview (DeadLetterView), never whole unless asked for.
	Payload []byte `json:"-"`

	// DecodeError says what of the stored row could not be decoded (headers that
	// are not a JSON object of strings, written by another service): the letter is
	// shown with what could be read. It can be discarded, not replayed.
	DecodeError string `json:"decode_error,omitempty"`
}

// DeadLetterOf is the view of the inbox's dead letter.
func DeadLetterOf(dl inbox.DeadLetter) DeadLetter {
	return DeadLetter{ID: dl.ID, Consumer: dl.Consumer, MessageID: dl.Message.ID, Topic: dl.Message.Topic,
		Position: dl.Position, Kind: dl.Kind, Reason: dl.Reason, Attempts: dl.Attempts, FirstAt: dl.FirstAt, DeadAt: dl.DeadAt,
		Payload: dl.Message.Payload, State: dl.State, ReplayRequestedAt: dl.ReplayRequestedAt, ReplayReason: dl.ReplayReason,
		ReplayAttempts: dl.ReplayAttempts, LastReplayError: dl.LastReplayError, ReplayNote: dl.ReplayNote,
		ReplayedAt: dl.ReplayedAt, DiscardedAt: dl.DiscardedAt, DiscardReason: dl.DiscardReason, Headers: dl.Message.Headers,
		DecodeError: dl.DecodeError}
}

// DeadLetterView is a DeadLetter as it is written out: its payload as a Preview.
type DeadLetterView struct {
	DeadLetter
	Payload Preview `json:"payload"`
}

// View is d written out, its payload previewed (full: with the whole of it).
func (d DeadLetter) View(full bool) DeadLetterView {
	return DeadLetterView{d, NewPreview(d.Payload, full)}
}

// Bounds on the headers a dead letter's view shows.
const (
	MaxHeaders     = 64
	MaxHeaderValue = 256
)

// BoundHeaders keeps at most MaxHeaders headers (by name order), values cut to
// MaxHeaderValue bytes on a rune boundary.
func BoundHeaders(h map[string]string) map[string]string {
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
