// Package idemnats connects idem to NATS JetStream: a Sink that publishes with the
// message's idempotency key as Nats-Msg-Id, a Source on a durable pull consumer
// with explicit double acks, EnsureStream to declare the stream, and an embedded
// NATS server (StartServer) that is idem's default broker.
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
// dedup covers that case.
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
// # Embedded server
//
// StartServer runs nats-server in the process with JetStream on a file store in
// ServerConfig.Dir, listening on 127.0.0.1 on a free port by default. Streams,
// messages and consumer positions survive a restart on the same Dir. Server.Connect
// connects in process, without TCP. Its logs go to ServerConfig.Logger, and a
// failure to start (an unusable Dir) is returned as an error rather than logged.
package idemnats
