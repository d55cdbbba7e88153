package idemamqp

import (
	"cmp"
	"fmt"
	"log/slog"
	"time"

	"github.com/idemhq/idem"
)

// Backend is the name this package puts in every *idem.BackendError it returns.
const Backend = "rabbitmq"

// DefaultPrefetch is the QoS prefetch count used when SourceConfig.Prefetch is zero:
// enough unacknowledged deliveries in flight to hide the round trip of acks without
// letting one consumer hoard a queue that others share.
const DefaultPrefetch = 64

// DefaultMaxNakDelay caps how long Nak holds a delivery before requeueing it when
// SourceConfig.MaxNakDelay is zero. It stays far below RabbitMQ's consumer_timeout
// (30 minutes by default), past which the broker closes a channel that keeps a
// delivery unacknowledged.
const DefaultMaxNakDelay = time.Minute

// maxShortStr is the longest AMQP 0-9-1 short string (exchange, routing key, queue,
// consumer tag, header key). amqp091-go fails to encode a longer one and then tears
// down the whole connection, so such input is refused before it is sent.
const maxShortStr = 255

// tooLong is the error for s, the value of field, when it is longer than an AMQP
// short string; fix says what to use instead.
func tooLong(field, s, fix string) error {
	return &idem.InputError{Field: field, Reason: fmt.Sprintf("is longer than %d bytes (got %d)", maxShortStr, len(s)), Fix: fix}
}

// SinkConfig configures a Sink. The zero value publishes to the default exchange,
// where a message's Topic is the name of the queue it goes to.
type SinkConfig struct {
	// Exchange receives every published message; Message.Topic is the routing key.
	// Empty means the default exchange, which routes a message to the queue named by
	// its routing key. The exchange must exist: publishing to a missing one fails
	// (the broker closes the channel with 404 NOT_FOUND and the sink opens a new one).
	Exchange string
	// Mandatory makes a message that no queue is bound to receive an error instead
	// of a silent drop: the broker returns it and Publish fails with a BackendError
	// naming its id (wrapping ErrUnroutable). Without it, RabbitMQ confirms an
	// unroutable message and discards it.
	Mandatory bool
}

func (cfg SinkConfig) withDefaults() (SinkConfig, error) {
	if len(cfg.Exchange) > maxShortStr {
		return cfg, tooLong("SinkConfig.Exchange", cfg.Exchange, "use an exchange name of at most 255 bytes, as AMQP requires")
	}
	return cfg, nil
}

// SourceConfig configures a Source.
type SourceConfig struct {
	// Queue is the queue to consume from. Required; it must exist (see EnsureQueue).
	Queue string
	// Prefetch is the channel's QoS prefetch count: how many deliveries the broker
	// sends before it waits for acks. Zero means DefaultPrefetch (64). Receive never
	// returns more than this many unsettled deliveries at once.
	Prefetch int
	// ConsumerTag names the consumer in the broker's management UI. Empty lets the
	// client generate a unique tag.
	ConsumerTag string
	// Quorum says Queue is a quorum queue. Quorum queues count deliveries in the
	// x-delivery-count (and, from RabbitMQ 4.0, x-acquired-count) header, so each
	// Delivery.Attempt is the broker's count and Features().Attempts is true. On a
	// classic queue the broker only flags a redelivery, and Attempt is 0.
	Quorum bool
	// MaxNakDelay caps the delay Nak honours: Nak(delay) keeps the delivery
	// unacknowledged for min(delay, MaxNakDelay) and then requeues it. Zero means
	// DefaultMaxNakDelay (1 minute). A negative value turns delays off: Nak requeues
	// at once and Features().DelayedNak is false. Keep it well below the broker's
	// consumer_timeout.
	MaxNakDelay time.Duration
	// Logger, if set, receives the failures the source cannot return to a caller:
	// a delayed Nak whose requeue failed after Nak had returned (the broker then
	// redelivers the message when the channel closes, so nothing is lost).
	Logger *slog.Logger
}

// withDefaults returns cfg with zero fields replaced by their defaults, validated.
// It is the one place the source's defaults are applied.
func (cfg SourceConfig) withDefaults() (SourceConfig, error) {
	cfg.Prefetch = cmp.Or(cfg.Prefetch, DefaultPrefetch)
	cfg.MaxNakDelay = cmp.Or(cfg.MaxNakDelay, DefaultMaxNakDelay)
	return cfg, cfg.validate()
}

func (cfg SourceConfig) validate() error {
	switch {
	case cfg.Queue == "":
		return &idem.InputError{Field: "SourceConfig.Queue", Reason: "is empty", Fix: "name the queue to consume from (declare it with EnsureQueue)"}
	case len(cfg.Queue) > maxShortStr:
		return tooLong("SourceConfig.Queue", cfg.Queue, "use a queue name of at most 255 bytes, as AMQP requires")
	case len(cfg.ConsumerTag) > maxShortStr:
		return tooLong("SourceConfig.ConsumerTag", cfg.ConsumerTag, "use a tag of at most 255 bytes, or leave it empty to have one generated")
	case cfg.Prefetch < 0 || cfg.Prefetch > 65535:
		return &idem.InputError{Field: "SourceConfig.Prefetch", Reason: fmt.Sprintf("is outside 0..65535 (got %d)", cfg.Prefetch),
			Fix: "leave it zero for the default of 64, or pick a count that fits AMQP's 16-bit prefetch"}
	}
	return nil
}

// QueueConfig configures a queue declared by EnsureQueue. The zero value is a
// durable classic queue.
type QueueConfig struct {
	// Quorum declares a quorum queue (x-queue-type=quorum): replicated, and counting
	// deliveries in x-delivery-count so that Delivery.Attempt is the broker's count.
	// Consume it with SourceConfig.Quorum set.
	Quorum bool
	// DeadLetterExchange, if set, receives messages the broker drops from the queue
	// (expired, over a length limit, or over a quorum queue's delivery limit) instead
	// of discarding them.
	DeadLetterExchange string
	// DeadLetterRoutingKey replaces the routing key of dead-lettered messages; empty
	// keeps their own.
	DeadLetterRoutingKey string
	// DeliveryLimit sets a quorum queue's x-delivery-limit: after that many failed
	// deliveries the broker dead-letters (or, without DeadLetterExchange, drops) a
	// message. Zero leaves the broker's default: none before RabbitMQ 4.0; 20 from
	// 4.0, where RabbitMQ documents that it counts deliveries rejected with
	// basic.reject, which this package never sends (Nak is basic.nack). Only valid
	// with Quorum.
	DeliveryLimit int
}

func (cfg QueueConfig) validate(name string) error {
	switch {
	case name == "":
		return &idem.InputError{Field: "name", Reason: "is empty", Fix: "name the queue; server-named queues are exclusive and lose messages with their connection"}
	case len(name) > maxShortStr:
		return tooLong("name", name, "use a queue name of at most 255 bytes, as AMQP requires")
	case len(cfg.DeadLetterExchange) > maxShortStr:
		return tooLong("QueueConfig.DeadLetterExchange", cfg.DeadLetterExchange, "use an exchange name of at most 255 bytes")
	case len(cfg.DeadLetterRoutingKey) > maxShortStr:
		return tooLong("QueueConfig.DeadLetterRoutingKey", cfg.DeadLetterRoutingKey, "use a routing key of at most 255 bytes")
	case cfg.DeliveryLimit < 0:
		return &idem.InputError{Field: "QueueConfig.DeliveryLimit", Reason: fmt.Sprintf("is negative (got %d)", cfg.DeliveryLimit),
			Fix: "leave it zero for the broker's default, or set a positive limit"}
	case cfg.DeliveryLimit > 0 && !cfg.Quorum:
		return &idem.InputError{Field: "QueueConfig.DeliveryLimit", Reason: "is set on a classic queue, which ignores it",
			Fix: "set QueueConfig.Quorum too, or leave DeliveryLimit zero"}
	}
	return nil
}
