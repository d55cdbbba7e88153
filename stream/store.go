package stream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/idemhq/idem"
)

// Event is one event of a channel. Seq is assigned at append time: 1 for a
// channel's first event, then exactly one more per event, so a client that saw
// seq N and then receives N+2 knows it missed one.
type Event struct {
	Seq  uint64          `json:"seq"`
	Type string          `json:"type"`
	ID   string          `json:"id,omitempty"`   // the entity the event is about
	Data json.RawMessage `json:"data,omitempty"` // empty: a hint (fetch the entity's state)
	At   time.Time       `json:"at"`
	// Key, if set, makes the append idempotent: appending a second event with the
	// same Key to the channel returns the first one instead (an outbox relay that
	// republishes after a crash). It is not sent to clients.
	Key string `json:"-"`
}

// Hint reports whether e carries no data: the client should fetch the current
// state of the entity e.ID instead of trusting a copy (the pattern for data that
// must never be shown stale).
func (e Event) Hint() bool { return len(e.Data) == 0 }

// Limits of what a channel and an event may be.
const (
	MaxChannel = 255
	MaxType    = 255
	MaxData    = 1 << 20
)

// Store keeps each channel's events in seq order. SQLStore (SQLite, Postgres, MySQL)
// and idemredis.PushStore implement it; streamtest.StoreSuite is the contract
// every implementation runs. An implementation in another package starts
// Append with ValidateAppend, ends Read with CheckTrimmed, and takes its client
// bounds from NewClientBounds.
type Store interface {
	// Append stores e on channel with the next seq and returns it as stored.
	Append(ctx context.Context, channel string, e Event) (Event, error)
	// Read returns up to limit events of channel with seq > since, in order.
	Read(ctx context.Context, channel string, since uint64, limit int) ([]Event, error)
	// Head is the seq of the channel's last event, 0 for none.
	Head(ctx context.Context, channel string) (uint64, error)
	// Ack records that client processed channel up to seq (never lowering what
	// it recorded before) and that the client was seen now.
	Ack(ctx context.Context, channel, client string, seq uint64) error
	// Trim deletes events older than retention and events every client of their
	// channel acknowledged, and returns how many it deleted. Clients not seen
	// for the store's ClientExpiry, and all but the MaxClients most recently
	// seen of a channel, are forgotten first: events they had not acked may go.
	Trim(ctx context.Context, retention time.Duration) (int, error)
}

// Bounds of the clients a store remembers for trimming, per channel.
const (
	// DefaultClientExpiry is how long a store remembers a client that does not
	// come back. A connected client's row is refreshed every few minutes.
	DefaultClientExpiry = 24 * time.Hour
	// DefaultMaxClients is how many clients per channel a store remembers (the
	// most recently seen); Trim forgets the others.
	DefaultMaxClients = 1000
)

// ClientBounds is what a Store remembers of clients for Trim: those seen
// within Expiry, at most Max per channel (the most recently seen).
type ClientBounds struct {
	Expiry time.Duration
	Max    int
}

// NewClientBounds returns the bounds of a store configured with expiry and
// maxClients (its ClientExpiry and MaxClients fields), a zero one meaning
// DefaultClientExpiry or DefaultMaxClients. A negative one is an
// *idem.InputError naming the field.
func NewClientBounds(expiry time.Duration, maxClients int) (ClientBounds, error) {
	switch {
	case expiry < 0:
		return ClientBounds{}, &idem.InputError{Field: "ClientExpiry", Reason: fmt.Sprintf("is negative (%v)", expiry), Fix: "leave it 0 for the default (24h)"}
	case maxClients < 0:
		return ClientBounds{}, &idem.InputError{Field: "MaxClients", Reason: fmt.Sprintf("is negative (%d)", maxClients), Fix: "leave it 0 for the default (1000)"}
	case expiry == 0:
		expiry = DefaultClientExpiry
	}
	if maxClients == 0 {
		maxClients = DefaultMaxClients
	}
	return ClientBounds{Expiry: expiry, Max: maxClients}, nil
}

// ErrTrimmed is returned by Read when events after since were trimmed: the
// client is too far behind to catch up from the stream and must reload its state.
var ErrTrimmed = errors.New("stream: events after this seq were trimmed")

// ValidateAppend returns an *idem.InputError naming the field when e may not be
// appended to channel: an empty, too long or not UTF-8 channel, an empty or too
// long type, data over MaxData or not JSON. Every Store's Append starts with it,
// so all stores refuse the same input the same way.
func ValidateAppend(channel string, e Event) error {
	if err := validateChannel(channel); err != nil {
		return err
	}
	switch {
	case e.Type == "":
		return &idem.InputError{Field: "Event.Type", Reason: "is empty", Fix: "name the event, e.g. \"order.updated\""}
	case len(e.Type) > MaxType:
		return &idem.InputError{Field: "Event.Type", Reason: fmt.Sprintf("is %d bytes", len(e.Type)), Fix: fmt.Sprintf("keep it under %d bytes", MaxType)}
	case len(e.Data) > MaxData:
		return &idem.InputError{Field: "Event.Data", Reason: fmt.Sprintf("is %d bytes", len(e.Data)), Fix: "send a hint (type and id) and let the client fetch the state"}
	case len(e.Data) > 0 && !json.Valid(e.Data):
		return &idem.InputError{Field: "Event.Data", Reason: "is not valid JSON", Fix: "pass a JSON document, or nothing for a hint"}
	}
	return nil
}

func validateChannel(channel string) error {
	switch {
	case channel == "":
		return &idem.InputError{Field: "channel", Reason: "is empty", Fix: "name the channel, e.g. \"user:42\""}
	case len(channel) > MaxChannel:
		return &idem.InputError{Field: "channel", Reason: fmt.Sprintf("is %d bytes", len(channel)), Fix: fmt.Sprintf("keep it under %d bytes", MaxChannel)}
	case !utf8.ValidString(channel):
		return &idem.InputError{Field: "channel", Reason: "is not valid UTF-8", Fix: "use a printable name"}
	}
	return nil
}

// CheckTrimmed returns what a Store's Read returns for the events out it read
// after since: ErrTrimmed, with out, when out does not start at since+1, or
// when it is empty while the channel's head (from head) is past since;
// otherwise out.
func CheckTrimmed(ctx context.Context, head func(context.Context, string) (uint64, error), channel string, since uint64, out []Event) ([]Event, error) {
	if len(out) > 0 {
		if out[0].Seq != since+1 {
			return out, ErrTrimmed
		}
		return out, nil
	}
	h, err := head(ctx, channel)
	if err != nil {
		return nil, err
	}
	if h > since {
		return nil, ErrTrimmed
	}
	return out, nil
}
