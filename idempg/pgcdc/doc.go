// Package pgcdc relays the outbox from PostgreSQL's write-ahead log: log-based
// change data capture, in one Go process, with the consumer side closed by
// inbox.WithLSN.
//
// The relay reads a logical replication slot with the built-in pgoutput plugin:
// the inserts of the outbox table (written by outbox.EnqueueTx, through a
// publication of that table) and, with Config.Messages, the logical decoding
// messages written by EmitTx (pg_logical_emit_message, no table row at all). It
// sends no query per message and polls nothing: the server pushes each committed
// transaction.
//
// # Guarantees
//
//   - Commit order: messages are published in the order their transactions
//     committed, and in statement order within one, globally for one slot (so per
//     key too).
//   - Nothing acknowledged that the broker did not store: the slot's confirmed
//     position moves to a transaction's end only after the Sink acknowledged every
//     message up to it. A relay that dies between publish and confirm leaves the
//     slot behind; the next one streams from the confirmed position and publishes
//     those messages again, with the same IDs and positions.
//   - Positions: every message carries HeaderSource, HeaderLSN (the commit LSN of
//     its transaction) and HeaderIndex (its index there). {commit LSN, index} grows
//     along the relay's output, so a consumer drops copies with one watermark per
//     source (inbox.WithLSN) instead of a row per message; brokers with dedup
//     (JetStream) drop them by ID as well.
//   - One reader per slot: relays on one slot take a session advisory lock; one
//     reads, the others stand by and take over within Config.LockRetry of its
//     connection ending.
//
// # Messages it cannot publish
//
// One bad message stops nothing. A row or WAL message that cannot be decoded (headers
// that are not a JSON object of strings, an empty ID or topic), and a message the
// sink refuses as invalid (an *idem.InputError such as a line break in a header, or
// an error marked idem.Permanent), is parked at once: written to the outbox table as
// a parked row with its reason and place in the log (outbox.ParkTx), where `idem
// outbox parked` and the admin API list it and an operator retries it (as a new row,
// which the relay reads) or discards it. The slot then moves past it. A message the
// broker refuses otherwise (no stream for its topic, a timeout) is retried with
// backoff; once it failed Config.MaxAttempts times in a row it is held, and parked as
// soon as a message after it is published: a broker that refuses everything parks
// nothing. While it waits, the error says how to skip its transaction by hand
// (pg_replication_slot_advance to the transaction's end), and Health reports what
// waits and since when, for a health check.
//
// # WAL messages and who may write them
//
// PostgreSQL grants EXECUTE on pg_logical_emit_message to PUBLIC: any role that can
// connect could write a message with EmitPrefix, and nothing in it says who wrote it.
// The relay therefore publishes none unless Config.Messages is set, and then only
// while every role that may execute the function may also insert into the outbox
// table (the relay checks at start and every CheckInterval, and stops with a
// *SetupError naming the roles and the REVOKE that fixes it). A role that cannot
// write the outbox can then reach the broker through the relay in no way. Without
// Config.Messages, messages of EmitPrefix are counted
// (idem_cdc_messages_ignored_total) and reported in a warning, not published.
//
// # What the server needs
//
// wal_level = logical (a restart), a role with REPLICATION (or superuser), free
// max_replication_slots and max_wal_senders, and the outbox table (its migrations
// applied), on which the role may SELECT, INSERT and UPDATE to park messages and
// mark them published. The relay creates the publication (inserts only) and the
// slot when missing; every setting it cannot work with is a *SetupError naming the
// fix, returned by Run without retrying. Slot names are the cluster's: one slot per outbox database.
//
// # What it costs
//
// A slot keeps the server's WAL from being recycled until the relay confirms it: a
// stopped relay fills the server's disk (the usual Debezium outage). The relay
// reports the retained WAL (idem_cdc_retained_wal_bytes) and warns above
// Config.RetainedWALWarn; DropSlot retires a slot for good. Each published batch
// costs one UPDATE of its outbox rows by id (below). Do not run the polling relay
// (outbox.Relay) on the same table: it would publish every message a second time.
//
// # Rows marked published
//
// After the broker acknowledged a batch and before the slot's position moves past
// it, the relay sets published_at of the batch's rows written by EnqueueTx (not of
// the parked ones, and EmitTx's messages have no row), as the polling relay does:
// the audit (package audit, which reads published rows only) sees them and repairs
// what a broker acknowledged and lost, `idem outbox` shows them published, and the
// outbox's Cleanup deletes them after its retention. What each crash gives:
//
//   - between the acknowledgement and the mark: nothing marked nor confirmed; the
//     next relay publishes the batch again and marks it;
//   - between the mark and the confirm: the rows are published (they were), and
//     published again by the next relay, whose mark keeps their first published_at;
//   - after the confirm: marked and confirmed.
//
// A mark that fails (tried three times while the connection lives) ends the
// session unconfirmed: the batch is published again, and no confirmed message is
// left unmarked. The publication carries inserts only, so the marks are not
// streamed back. Config.SkipMarkPublished leaves the rows unmarked (no audit;
// delete them on your schedule, not the parked ones). EmitTx's messages exist only
// in the WAL, invisible to SQL, to the outbox Admin (until one is parked) and to
// the audit.
package pgcdc
