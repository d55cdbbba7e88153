// Package inbox is the idempotent consumer: it turns a broker's at-least-once delivery
// into exactly-once effects.
//
// For each message the Consumer opens a transaction, claims the message's key (scope:
// the consumer's name) in it, runs the Handler with the same transaction, completes
// the key, commits, and only then acknowledges the message to the broker:
//
//	receive → BEGIN → claim key → handler(tx) → complete key → COMMIT → ack
//
// A crash or a cut connection between any two steps loses nothing and doubles
// nothing: before COMMIT the transaction rolls back (no key, no effect) and the broker
// redelivers; after COMMIT the redelivery finds the key, is acknowledged without
// running the handler, and counts as a duplicate. An ack that fails is therefore
// harmless.
//
// When the transaction fails for the database rather than a handler (a cut
// connection, a failover, a failed commit), the consumer keeps the batch and runs
// it again in process, waiting Config.Backoff between runs and reading nothing
// more meanwhile, for up to Config.TxRetryWindow (default 5 s); only then are its
// messages handed back to the broker. A cut connection thus costs a run of the
// batch, not a redelivery of each of its messages (and, with Kafka, of the records
// behind them). A commit whose answer was lost finds its keys recorded on the next
// run, and those messages are acknowledged as duplicates.
//
// # Failures
//
// A handler error rolls the message's writes back and the message is redelivered
// after Config.Backoff. An error marked Permanent (an undecodable payload, say), a
// message without a usable key, a message id reused for another payload, and a
// message that failed Config.MaxAttempts times go to the table idem_dead_letters with
// the payload, headers, reason, attempts and times, and are acknowledged: never
// dropped silently, never retried forever. DeadLetters lists them and Replay applies
// one again, exactly once.
//
// # Late messages
//
// Before claiming a key, the consumer refuses a message it must not apply late: a
// time-embedded key (UUIDv7, ULID) older than Config.MaxKeyAge (default Retention),
// whose record may have been forgotten; a key dated more than idemkey.MaxSkew ahead;
// an untimed key when Config.RequireTimedKeys is set; and a message whose
// idem.HeaderDeadline has passed, or is not a time. Such a message is acknowledged,
// not applied, counted in idem_inbox_refused_total{consumer,reason}, and dead-lettered
// with the reason as its kind (RefusedStaleKey and the others), so an operator sees it
// and may replay it: Replay does not judge it again. Keys and deadlines are read on
// Config.Now, assuming the producers' clocks agree with it within idemkey.MaxSkew.
//
// # Operating it
//
// DeadLetterAdmin is the operator's side, for tools in other processes (the admin
// API, `idem dlq`): it needs the database alone, never the handler. List pages
// through the dead letters of every consumer (by consumer, kind, reason, time; keyset
// by id), Get shows one, Discard closes one without applying it (a reason is
// required; the letter stays for audit and is never replayed), and RequestReplay
// marks letters for replay. The letter's own consumer performs the replay: Run polls
// for requests every Config.ReplayPollInterval and replays each exactly once, as
// Replay does. A letter whose key was applied meanwhile is closed as "already
// applied" without running the handler; a replay that fails stays requested, with
// its error, and is tried again, up to Config.MaxReplayAttempts times. A letter
// whose row cannot be decoded (headers another service wrote that are not a JSON
// object of strings) is listed and shown with its DecodeError, never failing the
// page around it; its replay gives up at once, saying why, and it can be discarded.
//
// With a Config.Registerer, Run keeps the gauge idem_inbox_dead_letters_open (the
// open letters, counted at start, every Config.GaugeInterval and soon after it
// dead-letters or replays) and, for a Source that is an idem.LagReporter,
// idem_inbox_lag_messages (what the broker holds for the consumer unacknowledged).
// Both are read by Run, with a bounded timeout, never by a scrape; a failed read
// leaves its gauge as it was.
//
// # Batches
//
// With Config.BatchSize > 1 up to that many messages share one transaction, each
// under a savepoint, so one failure rolls back only its own writes. One commit (one
// fsync) then serves the whole batch.
//
// The batch first runs without savepoints: every key recorded (in one statement
// where the store can: idem.TxRecorder), then each handler. Only if a handler fails
// does the transaction roll back and the batch run again guarded, a savepoint per
// message, so that each verdict (retry, dead letter) is the failing message's own.
//
// A handler still writes one message at a time. NewBatch takes a BatchHandler
// instead, called once per batch with the messages whose keys are new, in delivery
// order, in the batch's transaction, so that it can write all their effects in one
// statement (INSERT … SELECT FROM unnest on Postgres, a multi-row VALUES on MySQL and
// SQLite, pgx CopyFrom). Duplicates, messages dead-lettered before any handler and
// ids reused for another payload are not passed; a batch of nothing fresh does not
// call it. If it fails, the batch runs guarded as above, the handler called with
// one message at a time, so it may be called again with fewer messages and must
// keep no state across calls.
//
// # Databases
//
// The consumer is generic in the transaction type: idempg.TxDB and idempg.Store for
// pgx, idemsql.SQLDB with idempg.SQLStore or idemsqlite.Store for database/sql. The key
// store must keep its records in the same database as the effects; that is what
// makes the key and the effect commit together.
//
// On idempg.TxDB a message processed alone costs the round trips of a plain
// BEGIN, INSERT, COMMIT: its key is recorded as applied in one statement, sent in
// one pipeline with the BEGIN (idemsql.TxDB.BeginPipelined), then the handler's
// statements run, then COMMIT.
//
// # Tracing
//
// Each delivery gets a consumer span, idem.inbox.process, from the start of its
// batch to its ack or nak, with the messaging attributes (system, destination,
// message id, consumer group; partition and offset on Kafka), idem.scope (the
// consumer), idem.key, idem.attempt, idem.outcome and idem.inbox.verdict
// (processed, retried, dead_lettered). Each run of the handler is a child span,
// idem.inbox.apply, and the handler's context carries it, so its calls (an
// idemhttp.Transport, an effect) join the trace.
//
// The process span's parent is the trace context the message carries (the
// traceparent header the outbox relay sent), not a link to it: the issue asks that
// one order be one trace from the inbound request to the last downstream call, and a
// delivery processed alone has exactly one producer, whose span it continues. Links
// are for what is related but not the parent. A redelivery whose key was already
// applied makes a short span, idem.inbox.duplicate, with idem.duplicate=true and no
// apply span. Its parent is the message's context too (the redelivery is a delivery
// of the same message, so it belongs to the order's trace), and it carries a link,
// marked idem.applied_by=true, to the idem.inbox.process span of the delivery that
// applied the message: that delivery is the duplicate's cause, not its parent. The
// link survives restarts and other processes because the applying delivery's span
// context is recorded as the key's result, in the effect's transaction (one
// bytea/blob value of about 55 bytes, written only while tracing is on: stores that
// record batches in one statement take it as a parameter of that statement). A key
// applied while tracing was off, or deduplicated by sequence number (WithSequences
// keeps one watermark per producer, no row per key), has no link. (A consumer that
// processes a batch as one unit of work, rather than per message as here, would
// link its one span to each message's context.)
//
// A dead letter's replay (Replay, or a replay an operator requested, performed by
// the poll) is a consumer span, idem.inbox.replay, a child of the caller's span if
// any (the poll's has none), linked to the trace context stored with the dead
// letter's message, with its messaging attributes, idem.scope, idem.key,
// idem.outcome of the claim, idem.inbox.dead_letter.id, idem.inbox.replay.requested
// and idem.inbox.replay.result (applied, already_applied with idem.duplicate=true,
// gone, failed with the error). The handler runs under it. A link, not a parent:
// the replay is a new operation, started hours later by an operator, and its
// outcome belongs to the operator's trace, while the link leads back to the order.
//
// Config.TracerProvider and Config.Propagator are used when set, the global ones
// otherwise; idem never installs its own. While no span can record (no provider
// set, or a no-op one) none is started: the handler's context only carries the
// message's trace context, if any, so what it calls still continues the trace.
package inbox
