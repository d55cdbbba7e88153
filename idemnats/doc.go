// Package idemnats connects idem to NATS JetStream: a Sink that publishes with the
// message's idempotency key as Nats-Msg-Id, a Source on a durable pull consumer
// with explicit double acks, and EnsureStream to declare the stream. The embedded
// NATS server that is idem's default broker (StartServer, StartCluster) lives in
// package natsserver, so an application that only publishes and consumes links the
// client alone.
//
// It passes idemtest.BrokerSuite with every Features flag set.
//
// # Publishing
//
// Sink.Publish sends each idem.Message to the subject Message.Topic with header
// Nats-Msg-Id = Message.ID plus Message.Headers, and returns once JetStream has
// stored each one (its PubAck). A batch is pipelined: up to SinkConfig.MaxInFlight
// messages await their PubAck at once, which measured about 4.5 times the
// throughput of one-at-a-time publishing against a local server (see
// bench_test.go). A single message is published synchronously.
//
// Headers whose names start with "Nats-" are refused (they are server directives:
// Nats-Rollup would purge the stream), as are header names or values that would
// corrupt the header block. A payload larger than the server's max_payload is
// refused with an *idem.InputError before anything is sent; NATS's default is
// 1 MiB, below idem.MaxPayload, and the embedded server is set to carry 8 MiB.
//
// # Receiving
//
// NewSource creates (or updates) a durable pull consumer: explicit acks, AckWait
// (30 s by default), MaxDeliver unlimited, since dead-lettering is the inbox's
// decision, made with Delivery.Attempt. Receive keeps one pull request outstanding
// and returns what has arrived as soon as there is something; messages that arrive
// after a Receive gave up are kept for the next one, and Close hands back (Naks)
// what it fetched but never returned.
//
// Ack is a double ack (AckSync): it waits for the server's confirmation, so a lost
// ack is an error the caller sees, not a silent redelivery later. Nak is
// NakWithDelay and is not confirmed by the server; a lost Nak means the message
// comes back after AckWait instead.
//
// While a delivery is unsettled, the source sends it an in-progress ack (+WIP)
// every third of AckWait, which starts its AckWait again, up to
// SourceConfig.MaxExtension (30 minutes): a slow handler, or an inbox batch run
// again after a database failure, keeps its messages, and a consumer that dies or
// is cut off loses them to the others within about AckWait. The first settle
// ends it (a settle that fails leaves the message to AckWait), and so does Close:
// close a Source to stop its renewals. PauseRenewals stops them for fault
// injection, as a paused process's stop.
//
// A delivery's ID is its Nats-Msg-Id, or the idem.HeaderID header for messages
// published by other tools; a message with neither is delivered with an empty ID
// (the inbox dead-letters it), never dropped. Headers starting with "Nats-" and
// idem.HeaderID are left out of Delivery.Headers.
//
// # Features and when they hold
//
// Dedup: JetStream drops a message whose Nats-Msg-Id the stream stored within its
// Duplicates window (StreamConfig.Duplicates, 2 minutes by default) and answers
// with a PubAck marked duplicate, which Publish counts as success. A republish
// after the window, or into a recreated stream, is stored again; the inbox's
// dedup covers that case (or the DedupForever mode below).
//
// # Lag
//
// Source.Lag (idem.LagReporter) is the durable consumer's NumPending plus
// NumAckPending from one consumer-info request: JetStream's exact count of the
// messages it has not delivered to the durable or has delivered and not had acked.
//
// # Dedup forever
//
// JetStream's duplicate window is a time bound: an outbox relay that republishes
// after it, or a backfill replaying last month's messages, stores them again.
// SinkConfig.Dedup = DedupForever removes the bound where a stream can afford it.
// The sink publishes each message to a subject of its own, IDSubject(Topic, ID):
// Topic + "." + the ID as a subject token (IDs that are not plain tokens are
// base64url-encoded after a '~'). The stream, made by EnsureStream with
// StreamConfig.Dedup = DedupForever, keeps one message per subject and refuses a
// new one: discard new, discard_new_per_subject, max_msgs_per_subject 1, limits
// retention. A second publish of an ID is then refused by JetStream itself, at any
// time, with "maximum messages per subject exceeded", which the sink reports as a
// duplicate (Publish returns nil, Sink.PublishOne returns duplicate true), not an
// error. Nats-Msg-Id is still set, so within the window the usual PubAck duplicate
// answers first. The sink checks, on its first publish to each topic, that the
// stream capturing it is set up so (VerifyForeverStream), and fails with
// ErrNotForeverStream naming the setting otherwise: on an ordinary stream the
// mode would silently store the copy.
//
// Its limits:
//   - One subject per message. The stream's subject count grows with every
//     message, and with it the server's per-subject index, held in the server's
//     memory, unless MaxAge or MaxMsgs/MaxBytes bound the stream. The stream's subjects must capture
//     Topic + ".*" (or "Topic.>"), and consumers see Delivery.Topic as the
//     per-message subject, not Topic; filter on "Topic.*".
//   - "Forever" is as long as the stream keeps the message. MaxAge expiring it,
//     a purge, a delete or a recreated stream frees the ID, and a republish is
//     stored again. Work-queue or interest retention would free an ID at each ack,
//     so VerifyForeverStream refuses them.
//   - At a limit the stream refuses, it does not drop: with discard new, reaching
//     MaxMsgs or MaxBytes makes every publish of a new ID fail (a retryable
//     backend error; the outbox relay retries and nothing is lost) until MaxAge
//     frees room, while a known ID is still answered as a duplicate. Dropping old
//     messages instead would free their IDs, which is why discard old is refused.
//   - Storage: the stream keeps every message for as long as it dedups it, so
//     the retention is the dedup horizon; size MaxAge and the disk together.
//   - It replaces the duplicate window, not the inbox. It stops a message being
//     stored twice; it cannot stop a consumer from applying a stored message
//     twice (a redelivery after a lost ack, a crash between effect and ack), which
//     is what the inbox's key is for.
//
// OrderedPerKey: a stream stores messages in the order the server receives them,
// and a consumer delivers them in stream order. So messages published by one Publish
// call, or by successive calls from one goroutine, reach one Source in publish
// order, on every subject of the stream (order is per stream, stronger than per
// subject). It does not hold:
//   - across competing sources of one durable, which share the sequence;
//   - across a redelivery: a Nak'ed or timed-out message comes back after later
//     ones. With SourceConfig.MaxAckPending 1 the consumer delivers nothing new while
//     a message is unacknowledged, so order holds even then, one message at a time;
//   - after a failed pipelined Publish: later messages of the batch may be stored,
//     and the caller's retry then stores the failed ones after them. SinkConfig
//     MaxInFlight 1 stops at the first failure instead. (The client's automatic
//     retry of a pipelined publish is turned off because it reorders silently.)
//   - between concurrent publishers.
//
// DelayedNak: Nak(delay) is NakWithDelay; the server withholds the message for
// delay (NATS 2.7.1 or later).
//
// Attempts: Delivery.Attempt is the server's delivery count (NumDelivered in the
// ack subject's metadata, no extra round trip): 1 on the first delivery, counting
// Naks and AckWait expiries, kept across consumer restarts.
//
// # When an ack means stored
//
// A PubAck is what Publish returns on and what an outbox relay marks a message
// published on, so it must mean stored. nats-server's default does not: it
// acknowledges a write at once and syncs its file store to disk every two minutes
// (sync_interval), so a power loss or kernel crash loses acknowledged messages
// (Jepsen's 2025 analysis of NATS showed it). The embedded server (natsserver) therefore syncs
// every write before its ack (sync_interval: always) unless
// ServerConfig.SyncInterval asks for the periodic sync; that costs throughput,
// measured with BenchmarkFlow and BenchmarkPublish (server=embedded against
// server=embedded-interval). For a deployed server, an ack means stored when:
//   - every server runs with jetstream { sync_interval: always } (or accepts losing
//     the last interval's acknowledged messages on a power loss), and
//   - streams have Replicas 3 (StreamConfig.Replicas) on servers in different
//     failure domains: a PubAck of a replicated stream means a quorum stored it, so
//     one lost machine loses nothing acknowledged. Replicas 1 on one server is as
//     durable as that server's disk.
//
// # Clusters and leader elections
//
// On a JetStream cluster (streams with Replicas 3), a node's death or a network
// partition makes the stream and consumer leaders change, and for a few seconds a
// client sees PubAck timeouts, "no responders" and "JetStream system temporarily
// unavailable". The Sink retries those within SinkConfig.RetryTimeout (the stream's
// dedup makes a republished message harmless); Ack retries an unconfirmed ack and
// asks the consumer's ack floor whether it was applied; Source re-issues a pull
// request a leadership change ended; NewSource and EnsureStream retry too. A
// publish or an ack waiting for its reply when the client's connection drops is
// sent again as soon as the client has reconnected: the reply went down with the
// connection, and nats.go would keep the request waiting until its timeout. A
// closed connection, a missing stream and bad input are errors at once.
// natsserver.StartCluster runs such a cluster in the process, for tests: nodes can
// be killed and restarted, and the routes between them cut.
package idemnats
