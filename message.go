package idem

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Message is what crosses a broker: the unit the outbox publishes and the inbox
// consumes. Its ID is the idempotency key of the message's effect and travels as the
// broker's own dedup id where the broker has one (Nats-Msg-Id, AMQP message-id), as the
// header HeaderID (Kafka) or as the entry field "id" (Redis Streams), so a consumer can
// always recover it.
type Message struct {
	// ID is the message's idempotency key: the same logical message published twice
	// carries the same ID. Required, with the rules of Key.ID.
	ID string
	// Topic is where the message goes: a NATS subject, Kafka topic, Redis stream or
	// AMQP routing key. Sources set it on what they deliver.
	Topic string
	// OrderingKey, if set, keeps messages with the same value in order where the
	// broker can (the Kafka record key, so one partition; unused elsewhere).
	OrderingKey string
	// Headers are carried as broker headers, string to string.
	Headers map[string]string
	// Payload is the body, opaque to idem.
	Payload []byte
}

// HeaderID is the header that carries Message.ID on brokers without a native message
// id field (Kafka); the others carry it in their native field or, for Redis Streams,
// an entry field.
const HeaderID = "Idem-Msg-Id"

// MaxPayload is the largest payload the broker adapters accept (8 MiB); larger
// messages are refused with an *InputError before they reach the broker.
const MaxPayload = 8 << 20

// Validate reports whether m can be published: an ID with the rules of Key.ID, a
// topic, and a payload of at most MaxPayload bytes.
func (m Message) Validate() error {
	if err := validatePart("Message.ID", m.ID); err != nil {
		return err
	}
	if m.Topic == "" {
		return &InputError{Field: "Message.Topic", Reason: "is empty", Fix: "set the subject, topic, stream or routing key"}
	}
	if len(m.Payload) > MaxPayload {
		return &InputError{Field: "Message.Payload", Reason: fmt.Sprintf("is larger than %d bytes (got %d)", MaxPayload, len(m.Payload)),
			Fix: "store large bodies elsewhere and send a reference (claim-check pattern)"}
	}
	return nil
}

// Delivery is one received message and the handle that settles it with the broker.
// A delivery is settled once: by Ack after its effect committed (or it was found to
// be a duplicate, or dead-lettered), or by Nak to have it redelivered.
type Delivery struct {
	Message
	// Attempt is the broker's count of deliveries of this message, 1 on the first;
	// 0 when the broker does not count (the inbox then counts itself).
	Attempt int
	// Position is where the message sits in the broker, for logs and dead letters:
	// "stream seq 42", "partition 3 offset 1017", a Redis entry id.
	Position string
	// Settler acknowledges or rejects the delivery.
	Settler Settler
}

// Settler settles one delivery with the broker. A delivery is settled once:
// settling a delivery twice (Ack then Ack, Nak then Ack, ...) returns ErrSettled and
// does nothing, on every adapter. A settle that returned another error did not
// settle the delivery and may be tried again; meanwhile, a concurrent second settle
// returns ErrSettled.
type Settler interface {
	// Ack tells the broker the message is done; it is not delivered again (unless the
	// ack itself is lost, which the inbox's dedup makes harmless). Ack waits for the
	// broker's confirmation where the broker offers one (JetStream double ack).
	Ack(ctx context.Context) error
	// Nak asks for redelivery after about delay (immediately, or as soon as the
	// broker can, where it cannot wait).
	Nak(ctx context.Context, delay time.Duration) error
}

// ErrSettled is matched by the error of a second Ack or Nak of one delivery (see
// Settler): the first settle decided, and the second does nothing. That error is
// an *InputError too (it matches ErrInvalid): settling twice is the caller's
// mistake, final and not retryable.
var ErrSettled = errors.New("idem: the delivery was already settled")

// Source receives messages from a broker with at-least-once delivery: every message
// is delivered until it is acknowledged, and may be delivered more than once.
type Source interface {
	// Receive blocks until at least one delivery is available or ctx ends, and
	// returns at most max deliveries. A source that is closed returns ErrClosed.
	Receive(ctx context.Context, max int) ([]Delivery, error)
	// Close stops receiving. Unsettled deliveries are redelivered later, to this or
	// another consumer.
	Close() error
}

// Sink publishes messages to a broker. Publish returns once the broker has accepted
// (persisted, confirmed) every message; on error, some may have been published, and
// publishing them again is safe because each carries its ID as the broker's or the
// consumer's dedup key.
type Sink interface {
	Publish(ctx context.Context, msgs ...Message) error
}

// Features says what a broker adapter guarantees beyond at-least-once delivery, so
// idemtest.BrokerSuite checks what it promises and nothing more.
type Features struct {
	// Dedup: the broker drops a message republished with an ID it saw within its
	// dedup window (JetStream's Nats-Msg-Id), so consumers see it once.
	Dedup bool
	// OrderedPerKey: messages with the same OrderingKey (Kafka) or on the same
	// subject/stream/queue (the others) are delivered in publish order to one consumer.
	OrderedPerKey bool
	// DelayedNak: Nak's delay is honoured by the broker; otherwise the adapter
	// redelivers as soon as it can.
	DelayedNak bool
	// Attempts: deliveries carry the broker's delivery count in Delivery.Attempt.
	Attempts bool
}

// Lag is how far a consumer is behind its broker, as the broker counts it.
type Lag struct {
	// Messages is the number of messages the broker holds for this consumer (its
	// group, subscription or queue) that it has not acknowledged: not yet
	// delivered, plus delivered and not yet settled. 0 means caught up.
	Messages int64
}

// LagReporter is implemented by sources that can ask their broker how far behind
// their consumer is (idemnats, idemkafka, idemredis, idemamqp, idemsqs). The inbox
// exports it as idem_inbox_lag_messages{consumer}. Lag asks the broker: it is a
// network call, made every few seconds, never per message.
type LagReporter interface {
	Lag(ctx context.Context) (Lag, error)
}

// FeatureReporter is implemented by sources and sinks that declare their Features.
type FeatureReporter interface {
	Features() Features
}
