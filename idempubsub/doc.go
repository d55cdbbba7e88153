// Package idempubsub connects idem to Google Cloud Pub/Sub (through
// cloud.google.com/go/pubsub/v2): a Sink that publishes with the message's
// idempotency key as an attribute and its ordering key, a Source that pulls from a
// subscription, renews each message's ack deadline while its handler runs and
// acknowledges after the effect committed, and EnsureTopic / EnsureSubscription to
// declare both. It is tested against pstest, the in-process fake server of the same
// module, through idemtest.BrokerSuite and the inbox's proof (inboxtest.Proof).
//
// # Publishing
//
// Sink.Publish sends each idem.Message to the topic Message.Topic (an ID in the
// client's project, or "projects/P/topics/T") with attribute idem.HeaderID
// ("Idem-Msg-Id") = Message.ID, Message.Headers as attributes (so traceparent and
// tracestate travel as attributes, as headers do on the other brokers), and
// Message.OrderingKey as the ordering key. It sends Publish requests itself, one
// after another, each holding up to 1,000 messages of one topic: what the Go
// client's Publisher does with EnableMessageOrdering, without its background
// batching, so Publish returns exactly when Pub/Sub has stored every message.
//
// What Pub/Sub would refuse for the whole request is refused before anything is
// sent, with an *idem.InputError naming the header: more than 100 attributes
// (the ID's included), a key over 256 bytes or a value over 1024, keys starting
// with "goog" (reserved), text that is not UTF-8, an ordering key over 1024 bytes.
//
// When an ack means stored: a Publish response is given once Pub/Sub has written
// the message to storage in several zones of the topic's region, so an ack means
// stored with nothing to configure; a message storage policy only chooses the
// regions. What Pub/Sub keeps for a subscription is bounded by its retention (7
// days by default): a consumer down for longer loses messages it never received.
//
// Pub/Sub does not deduplicate what is published twice (its message IDs are its
// own), so a message an outbox relay republishes after a crash is delivered twice,
// with the same Idem-Msg-Id, and the inbox drops the copy.
//
// # Receiving
//
// Source.Receive sends Pull requests (at most one at a time, under the source's
// own context, so a Receive that gives up leaves its Pull to finish and keeps what
// it brings for the next Receive). From the moment a message is pulled until it is
// settled, the source renews its ack deadline to SourceConfig.Lease (60 s by
// default) shortly before it runs out, for at most MaxExtension (60 min): a slow
// handler keeps its message, and a crashed consumer's messages come back within
// Lease. At most MaxOutstanding (1,000) deliveries are unsettled at once.
//
// Ack goes in an Acknowledge request, together with the acks other goroutines make
// while the previous request is on its way, and returns Pub/Sub's answer for its
// ack ID (an unclear answer is asked again for that ack ID alone). Nak(delay) is a
// ModifyAckDeadline to delay, rounded up to whole seconds and capped at 600 s:
// Pub/Sub itself withholds the message that long, then delivers it to any
// consumer of the subscription (a Nak with delay 0 gives it back at once). Close
// gives back (Nacks) what was pulled but not handed out and stops renewing; a
// delivery returned before Close can still be settled, and one left unsettled
// comes back within Lease.
//
// A delivery's ID is its Idem-Msg-Id attribute; a message published by another
// tool without one is delivered with an empty ID, which the inbox dead-letters,
// never dropped. Attributes starting with "goog" (Pub/Sub's and its client
// libraries', such as googclient_traceparent) are left out of Delivery.Headers.
// Delivery.Topic is the subscription's topic, and Position the server's message
// ID.
//
// The source uses unary Pull rather than StreamingPull: one request per batch,
// simple to bound and to cancel. On the real service StreamingPull has the higher
// throughput; what is measured here is on pstest (see BENCHMARKS.md).
//
// # Exactly-once delivery
//
// On a subscription with exactly-once delivery (SubscriptionConfig.ExactlyOnce),
// Pub/Sub does not redeliver a message whose ack it confirmed, and tells, per ack
// ID, when an ack did not take. Ack then retries the transient failures
// (TRANSIENT_FAILURE_*) a few times within its ctx, returns ErrInvalidAckID when
// the ack ID expired (the message is delivered again, and the inbox recognises it),
// and a *idem.BackendError for any other reason. A nil error from Ack means Pub/Sub
// confirmed the ack. On other subscriptions acks are best effort: a nil error means
// the request was accepted, and the message may rarely come back. Either way the
// inbox stays needed: exactly-once delivery does not drop a message published
// twice, and it holds within one region only.
//
// # Features and when they hold
//
// Source.Features reports what the subscription promises, read with
// GetSubscription at NewSource:
//   - Dedup is false: Pub/Sub does not drop a republished message.
//   - OrderedPerKey on a subscription with message ordering: messages with the same
//     ordering key, published to one region, are delivered in publish order. A
//     Nak'ed or expired message is delivered again before the later messages of
//     its key, which the service then delivers again too (acknowledged or not):
//     the inbox drops those copies.
//   - Attempts on a subscription with a dead-letter policy, the only kind on which
//     Pub/Sub counts deliveries (delivery_attempt); Pub/Sub then also moves a
//     message to the dead-letter topic itself after MaxDeliveryAttempts (5 to
//     100). Elsewhere Delivery.Attempt is 0 and the inbox counts attempts.
//   - DelayedNak: Pub/Sub withholds a Nak'ed message for the delay (whole seconds,
//     at most 600 s).
//
// GetSubscription needs pubsub.subscriptions.get, which roles/pubsub.subscriber
// lacks. Without it the source still consumes, assumes the least (a 10 s ack
// deadline, no ordering, no counts: Features has only DelayedNak) and names the
// subscription as Delivery.Topic.
//
// # No consumer lag
//
// The Source does not implement idem.LagReporter, so the inbox exports no lag for
// it: the Pub/Sub API has no call that counts a subscription's backlog. Its
// unacknowledged messages (subscription/num_undelivered_messages) and the age of
// the oldest (subscription/oldest_unacked_message_age) are Cloud Monitoring
// metrics; alert on those.
//
// # What pstest does not do
//
// The tests run on pstest, which differs from the service where it matters here:
//   - Exactly-once delivery is recorded but not enforced: pstest redelivers when a
//     deadline passes whatever was acked before, accepts (and ignores) an ack of an
//     expired ack ID, and never answers with per-ack-ID failures. The tests make it
//     answer as the service documents (a reactor on Acknowledge) to check how Ack
//     reads those answers; the service's own enforcement is not exercised.
//   - Message ordering: pstest hands out only the oldest unacknowledged message of
//     each ordering key, one at a time, where the service delivers several in
//     order. So the broker suite runs on unordered subscriptions, and ordering is
//     checked by acknowledging as messages arrive.
//   - A subscription's RetryPolicy (server-side backoff after a Nack) is stored
//     and ignored; this adapter does not use it anyway.
//   - Pub/Sub's limits (attribute sizes and counts, request size) are not checked
//     by pstest; the sink checks them itself.
//   - pstest forgets unacknowledged messages 10 minutes after they were published.
package idempubsub
