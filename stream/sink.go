package stream

import (
	"context"

	"github.com/idemhq/idem"
)

// Headers of an idem.Message that Sink maps onto the event.
const (
	HeaderEventType = "Idem-Event-Type" // Event.Type; default "message"
	HeaderEntity    = "Idem-Entity"     // Event.ID; default the message's OrderingKey
)

// Sink appends messages to streams, so an outbox relay (outbox.Outbox.Relay) can
// feed the browser an event committed with the business write, without a dual
// write: Message.Topic is the channel, Message.ID the idempotency key of the
// append (a relay that republishes after a crash appends nothing new), the
// payload the event's data (JSON; empty for a hint).
type Sink struct {
	// Server appends and wakes the channel's clients. Required.
	Server *Server
}

// Publish appends each message in order; it stops at the first failure.
func (s Sink) Publish(ctx context.Context, msgs ...idem.Message) error {
	for _, m := range msgs {
		e := Event{Type: m.Headers[HeaderEventType], ID: m.Headers[HeaderEntity], Data: m.Payload, Key: m.ID}
		if e.Type == "" {
			e.Type = "message"
		}
		if e.ID == "" {
			e.ID = m.OrderingKey
		}
		if _, err := s.Server.Append(ctx, m.Topic, e); err != nil {
			return err
		}
	}
	return nil
}
