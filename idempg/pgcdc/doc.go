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
// The relay also keeps its state in idem_cdc_slots in the outbox's schema (Slot
// loss), which the outbox's migrations create (005_cdc_slots: `idem migrate up`,
// migrate.Up with migrate.Outbox, or outbox.New): the role needs SELECT, INSERT and
// UPDATE on it, and no CREATE on the schema. Only where the table is missing does
// the relay create it itself, if its role may; otherwise Setup and Run fail with a
// *SetupError (check "state") naming the migration and the GRANT.
//
// # Slot loss
//
// A PostgreSQL 15 logical slot lives on the primary only: a standby promoted by a
// failover has none, an operator may drop it, and max_slot_wal_keep_size
// invalidates a slot that retained too much WAL (wal_status 'lost'). A slot made
// again starts at the server's current position, so whatever committed between
// the old slot's confirmed position and the new slot's start would never be
// streamed. The relay keeps a row per slot in idem_cdc_slots, beside the outbox
// table (created by the outbox's migrations), and calls it a loss when the slot it had is missing or
// invalidated, or when a recovery did not finish. A first start is no loss, nor a
// slot retired with DropSlot. On a loss, by default, it:
//
//   - logs an ERROR naming the slot, why, and the last confirmed position it
//     recorded (at most CheckInterval old), counts idem_cdc_slot_lost_total, and
//     sets Health.SlotLoss (Stalled reports it while the recovery runs);
//   - creates the slot again with an exported snapshot and reads, in a
//     transaction on that snapshot, the outbox rows neither marked published nor
//     parked: exactly the rows committed before the new slot's start that no relay
//     marked, which the slot will not stream;
//   - publishes them in id order (not commit order), under a new source epoch
//     (HeaderSource "db/slot@2", then @3 …) at positions {start − 1, id − first
//     id + 1}, just before the new slot's, marks them, logs the gap (its LSN range,
//     the rows recovered), counts idem_cdc_slot_recovered_total; then streams.
//
// What the consumers see: every row committed in the gap once, and nothing
// marked published before the loss again. A new source gives a WithLSN consumer
// a fresh watermark: the lost slot's positions say nothing about the new one's
// (after an asynchronous failover the promoted server's log reuses positions the
// old primary's relay had published). What cannot be recovered or told apart:
//
//   - WAL-only messages (EmitTx, Config.Messages) committed in the gap and not
//     yet published are lost: they have no row. The ERROR says so.
//   - Rows the broker acknowledged but the relay had not marked when the slot was
//     lost (the instant between a batch's acknowledgement and its mark, or marks
//     a failover lost with the old primary's unreplicated WAL) are published again
//     under the new source: consumers deduplicating by ID (inbox keys, JetStream's
//     Nats-Msg-Id window) drop them, a WithLSN consumer does not.
//   - A relay that dies during the recovery resumes it with the first attempt's
//     positions: a batch stored and not marked goes out again where it was, and a
//     WithLSN consumer drops it.
//
// Config.RefuseSlotLoss (--cdc-refuse-slot-loss) stops instead, with a
// *SetupError that says what to do, for operators who want to decide by hand.
// It is off by default because the recovery loses nothing the outbox holds and
// says what it cannot recover, while a refusal stops every publication until
// someone acts. SkipMarkPublished refuses too: the relay then cannot tell which
// rows it published. DropSlot retires a slot on purpose: the next start creates
// one (of a new source epoch) without recovering anything.
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
