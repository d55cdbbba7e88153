// Package idemamqp is the RabbitMQ adapter of idem: an idem.Sink that publishes with
// publisher confirms and an idem.Source that consumes with manual acknowledgements,
// both on github.com/rabbitmq/amqp091-go. They pass idemtest.BrokerSuite like every
// other broker adapter.
//
// # Publishing
//
// A Sink publishes on one channel in confirm mode. Message.ID travels as the AMQP
// message-id property, Message.Headers as the headers table, Message.Topic as the
// routing key (on the default exchange, the queue name), and every message is
// persistent. Publish sends a batch in order, waits for the broker's confirm of
// each, and fails with a *idem.BackendError naming the message when the broker
// nacks it, when the channel dies before it is confirmed (a publish to a missing
// exchange makes the broker close the channel), or, with SinkConfig.Mandatory, when
// no queue is bound to receive it. Without Mandatory, RabbitMQ confirms and drops an
// unroutable message: set it unless an exchange with an alternate exchange catches
// those.
//
// # Consuming
//
// A Source consumes one queue with autoAck off and a QoS prefetch. Receive returns
// what has arrived, blocking only for the first delivery. Ack is basic.ack; Nak is
// basic.nack with requeue. RabbitMQ cannot delay a requeue, so Nak(delay) keeps the
// delivery unacknowledged for the delay (at most SourceConfig.MaxNakDelay, holding
// one prefetch slot) and then nacks it; Nak itself returns at once. Deliveries carry the
// message-id (or, from producers that set it instead, the idem.HeaderID header) as
// their ID; a message with neither is delivered with an empty ID for the inbox to
// dead-letter, never dropped. Position is "queue Q delivery tag N".
//
// When the channel or the connection dies, Receive returns a retryable
// *idem.BackendError rather than blocking, and the broker requeues every
// unacknowledged delivery. The next Receive opens a new channel; a closed connection
// needs a new connection and a new Source (or Sink). Automatic recovery of amqp091-go
// must be off on the connection (the constructors refuse it): it would make stale
// delivery tags ack the wrong messages.
//
// What a lost connection costs: delivery tags die with their channel, so the
// batch a consumer had in hand is processed (the inbox commits it) and then cannot
// be acknowledged, and comes back to be dropped by key. Each connection cut and
// each consumer restart costs one batch of redeliveries; the deliveries that had
// reached the source but were not yet returned are dropped with the channel, not
// handed out. JetStream's subscription survives a reconnect and its acks go
// through. Under idem verify's dense connection cuts (one every 40–60 orders, each
// failing the acks of both consumers' batches) RabbitMQ delivers 2.3–2.9 times per
// order on Postgres and MySQL, where the other brokers stay at or below 1.4; what
// is left beyond the failed acks, the injected lost acks and the relay's stored
// copies is 1.1–1.4 (BENCHMARKS.md).
//
// # What RabbitMQ guarantees (Features)
//
//   - Dedup: no. RabbitMQ delivers a republished message again; the inbox
//     deduplicates by ID.
//   - OrderedPerKey: yes, for a single consumer on one queue while nothing is
//     requeued: a queue delivers in the order messages were published on one channel.
//     A Nak or a closed channel requeues messages behind later ones, and competing
//     consumers each get a subset.
//   - DelayedNak: yes (unless SourceConfig.MaxNakDelay < 0), honoured by the source
//     holding the delivery unacknowledged, capped at MaxNakDelay; a source that closes
//     first lets the broker requeue at once.
//   - Attempts: only on quorum queues (SourceConfig.Quorum), from their
//     x-delivery-count / x-acquired-count headers; classic queues only flag a
//     redelivery, and Attempt is 0 so the inbox counts itself.
//
// Declare queues durable (EnsureQueue does) so persistent messages survive a broker
// restart; prefer quorum queues for replication and delivery counts.
//
// # Lag
//
// Source.Lag (idem.LagReporter) is the queue's ready messages (a passive declare)
// plus the deliveries this source's channel holds unacknowledged. AMQP does not
// report a queue's unacknowledged count, so deliveries other consumers hold are
// not in it: exact with one source per queue.
//
// # When an ack means stored
//
// A publisher confirm (what Publish waits for) means stored when the message is
// persistent (the Sink sets it) and every queue it is routed to is a durable queue,
// with SinkConfig.Mandatory so an unroutable message is an error instead of
// confirmed and dropped. On a quorum queue (QueueConfig.Quorum) RabbitMQ confirms
// once a majority of its replicas wrote the message to disk (fsync): run it with 3
// replicas on nodes in different failure domains. A classic queue confirms from one
// node, after its own disk write, and loses what that node loses.
package idemamqp
