// Package outbox solves the dual write: a service that changes its database and
// publishes an event must never publish for a write that rolled back, nor lose the
// event of a write that committed.
//
// EnqueueTx writes the event into the table idem_outbox in the caller's transaction
// (pgx.Tx or *sql.Tx; PostgreSQL or SQLite), so it commits or rolls back with the
// business write. A Relay then publishes committed rows to an idem.Sink (NATS, Kafka,
// Redis Streams, RabbitMQ, a webhook) and marks them published:
//
//	BEGIN; UPDATE orders …; outbox.EnqueueTx(ctx, tx, msg); COMMIT   ← the service
//	lock partitions; SELECT a batch → sink.Publish → UPDATE published_at   ← the relay
//
// Publication is at-least-once: a relay that dies after publishing and before
// marking publishes the rows again. Each message carries its ID as the broker's dedup
// id (Nats-Msg-Id, the Kafka header Idem-Msg-Id, the AMQP message-id, the webhook's
// Idempotency-Key), so the broker (JetStream) or the consumer's inbox drops the copy:
// the effect downstream happens once.
//
// # Relays, order and latency
//
// On PostgreSQL several relays may run: each round takes a random quarter of the
// ordering partitions that have due rows (advisory locks, skipping those another relay
// holds) and reads only their rows, so a row is published by one relay at a time and the messages of one OrderingKey leave in the order they were
// enqueued by transactions that committed one after another (as writes to one
// aggregate do, serialized by its row lock). A message waiting out a backoff holds
// back the later messages of its key; a parked one no longer does. EnqueueTx sends
// NOTIFY idem_outbox, and a relay with a Notifier (idempg.NewNotifier) wakes on
// commit instead of waiting for its poll. On SQLite run one relay per file; it is
// woken in-process by EnqueueTx of the same Outbox. A PostgreSQL round publishes up
// to RelayConfig.RoundBatches batches of its partitions, each sent while the one
// before it is marked and the one after it is read, and commits the marks at its end.
//
// # Failures
//
// A failed publication is retried with backoff; after RelayConfig.MaxAttempts the
// message is parked with its last error: visible (Parked, the idem_outbox_parked
// gauge) and retried on demand (Retry), never dropped. Published rows are deleted
// after RelayConfig.Retention, in small batches.
//
// The relay decodes each row on its own. A row it cannot publish as written —
// headers that are not a JSON object of strings, a msg_id or topic that
// idem.Message.Validate refuses, a part outside [0, 64), a payload over
// idem.MaxPayload, a value of the wrong type (SQLite keeps any) — is a failed
// publication of that message alone: its decode error, naming the row, the column
// and the fix, is recorded as the attempt's error (idem_relay_failures_total counts
// it), and it is parked after MaxAttempts, while the rows around it are published
// and the later messages of its ordering key wait behind it. The length of each
// variable-length column is checked before its value is read. A round fails as a
// whole only when the database does (idem_relay_round_failures_total); Run retries
// it with backoff, up to 5 s apart. The messages such a round had published (its
// connection cut, its commit failed) are marked in a transaction of their own,
// tried for up to 5 s, rather than published again by the next round: a broker
// that keeps every copy (Kafka, Redis Streams, Pub/Sub) would deliver each again.
// Only a relay that dies mid-round publishes its round again. A failure that repeats — rounds during a
// database outage, LISTEN, every message during a broker outage — is logged at its
// 1st, 8th, 16th, 32nd… occurrence with the count, and its end once; a parked
// message is always logged. Stall tells a health check how long messages have
// waited with none published, by any relay, whatever the cause.
//
// # Operating it
//
// Admin is the operator's side, for tools in other processes (the admin API, `idem
// outbox`): it needs the database alone. Status counts the backlog per topic and
// partition (waiting, parked, discarded, the oldest waiting message's age) from an
// index of unpublished rows, and lists the relay instances: each Relay reports its
// rounds in idem_outbox_relays (RelayConfig.Instance, at most once a second, outside
// the round's transaction), and one silent for 3 poll intervals or 30 s is stale.
// Run deletes its relay's row when it returns; the row of a relay that died is
// listed, stale, for an hour, then forgotten (and deleted by Cleanup).
// Parked pages through the parked messages (one whose row cannot be decoded, such
// as headers another service wrote that are not a JSON object of strings, is listed
// with its DecodeError, never failing the page); Retry puts one back in line;
// Discard gives up on one for good, with a reason: it is never published and stays
// visible for audit. The log-based relay (idempg/pgcdc) parks what it cannot publish
// here too (ParkTx); it reads inserts only, so Retry puts such a message back in
// line as a new row.
//
// # The table, for services in other languages
//
// Any service can write to idem_outbox in its own transaction and let `idem relay`
// publish: insert msg_id (the idempotency key), topic, ordering_key (empty for none),
// part (any integer in [0, 64): fnv32a(ordering_key or msg_id) % 64 keeps per-key
// order), headers (a JSON object of strings), payload, and created_at = available_at
// = the current Unix time in milliseconds; then NOTIFY idem_outbox (PostgreSQL).
// The relay reads available_at only once it has tried a message (it schedules the
// retries): a producer's clock or unit does not hold a new row back. A row that
// breaks the contract is parked with its reason (see Failures), never published
// half-decoded, and never stops the others.
//
// # Tracing
//
// EnqueueTx makes a span, idem.outbox.enqueue, and stores its trace context in each
// message's headers under the propagator's names (W3C traceparent and tracestate):
// the trace travels with the row, in the headers column, with no schema change. The
// relay makes one producer span per message published, idem.outbox.publish, whose
// parent is that stored context (messaging.system when the sink reports one,
// messaging.destination.name, messaging.message.id, idem.outbox.partition), and
// sends the message with the publish span's context in place of the stored one. A
// message published again, after a failure or by a relay that died before marking
// it, gets a new publish span under the same enqueue span: the trace is kept. A
// relay without a propagator (a process with no OpenTelemetry set up) sends the
// stored headers unchanged, so the consumer still continues the producer's trace.
// Config.TracerProvider and RelayConfig.TracerProvider (and their Propagator) are
// used when set, the global ones otherwise; idem never installs its own. Services in
// other languages that write the table may put a traceparent in headers too.
package outbox
