// Package idemsqs is the Amazon SQS FIFO adapter of idem: an idem.Sink that
// publishes with SendMessageBatch and an idem.Source that long-polls ReceiveMessage,
// both on github.com/aws/aws-sdk-go-v2/service/sqs. They pass idemtest.BrokerSuite
// and the inbox's exactly-once proof (inboxtest.Proof) against sqsfake, an
// in-process SQS, like every other broker adapter.
//
// # Publishing
//
// A Sink publishes to FIFO queues (names ending ".fifo"; Message.Topic is the name
// or the queue URL). Message.ID is the MessageDeduplicationId and
// Message.OrderingKey the MessageGroupId; a message without an OrderingKey goes to
// SinkConfig.DefaultGroup ("default"), one group per queue, in order and one batch
// in flight at a time: set OrderingKey (an order, an account) to let consumers
// work on groups in parallel. An ID or key that SQS would refuse as such an id
// (over 128 characters, or not ASCII letters, digits and punctuation) is sent as
// "idem-sha256-" and its SHA-256, and the ID itself travels in the idem.HeaderID
// attribute, so the consumer sees it whole. Headers travel as String message
// attributes, traceparent and tracestate included. SQS carries at most 10
// attributes, names of letters, digits, '-', '_' and '.', non-empty values of
// text: the sink refuses anything else with an *idem.InputError before sending. The
// body is the payload when it is text SQS accepts; otherwise base64, with the
// attribute Idem-Body-Encoding=base64 (an empty payload: "empty", body "-").
// Messages larger than SinkConfig.MaxMessageSize (SQS's 256 KiB by default,
// attributes included) are refused. Publish sends batches of up to 10 messages.
//
// When an ack means stored: SQS answers SendMessage(Batch) once it has stored the
// message redundantly across several availability zones, so a successful entry
// means stored with nothing to configure. A batch can succeed in part: Publish
// reports the failed entries as errors. What SQS keeps is bounded by the queue's
// MessageRetentionPeriod (4 days by default, at most 14): a message not received
// by then is deleted, so set it above the longest outage a consumer may have.
//
// # Consuming
//
// A Source long-polls (20 s) for up to 10 messages per call, with all attributes.
// While a delivery is unsettled the source extends its visibility timeout every
// third of SourceConfig.VisibilityTimeout, up to SourceConfig.MaxExtension, so a
// slow handler keeps its message and a crashed consumer's messages come back
// within one timeout. Ack deletes the message (the deletes of concurrent acks go
// out together in DeleteMessageBatch calls); Nak sets its visibility timeout to the
// delay, so SQS itself redelivers it then. Close makes unsettled messages visible
// at once. Delivery.Attempt is ApproximateReceiveCount, Position "queue Q seq N".
// The ID is the idem.HeaderID attribute if present, else the
// MessageDeduplicationId (for another producer using content-based deduplication,
// the SHA-256 of its body). A message whose body cannot be decoded is delivered
// with an empty ID and the header Idem-Decode-Error, for the inbox to dead-letter:
// nothing is dropped.
//
// # Lag
//
// Source.Lag (idem.LagReporter) is the queue's ApproximateNumberOfMessages plus
// ApproximateNumberOfMessagesNotVisible plus ApproximateNumberOfMessagesDelayed
// (one GetQueueAttributes): every message not yet deleted. SQS's counts are
// approximate and trail changes; a Client wrapper needs GetQueueAttributes.
//
// # What SQS FIFO guarantees (Features), and what it does not
//
//   - Dedup: yes, but only for 5 minutes. SQS drops a message sent with a
//     MessageDeduplicationId it accepted in the last 5 minutes (DedupWindow; fixed,
//     not configurable, counted from the first send). An outbox relay that retries
//     after a longer outage, a producer that republishes an old message, or another
//     producer that sends the same message under another dedup id gets it
//     delivered again. The inbox's key (Message.ID) is what makes the effect happen
//     once beyond the window; the window only saves it work.
//   - OrderedPerKey: per message group. SQS delivers a group's messages in send
//     order and gives none of a group to anyone while one of it is unsettled, so
//     one slow message holds up its group (MaxExtension bounds for how long).
//   - DelayedNak: yes, as a visibility timeout (whole seconds, up to 12 hours from
//     the receive).
//   - Attempts: yes, ApproximateReceiveCount.
//
// SQS delivers a message again if its receipt handle is stale when deleted (its
// visibility timeout ended and another consumer received it): SQS answers the
// delete with success and keeps the message, and the inbox absorbs the copy. On a
// standard queue a Source works (no dedup, no order); the Sink publishes only to
// FIFO queues.
//
// Credentials, region and endpoint come from the *sqs.Client the caller builds
// (config.LoadDefaultConfig: the standard AWS environment variables, shared files,
// or the instance's role); this package never sees or prints them.
package idemsqs
