// Package pgcdc relays the outbox from PostgreSQL's write-ahead log: log-based
// change data capture, in one Go process, with the consumer side closed by
// inbox.WithLSN.
//
// The relay reads a logical replication slot with the built-in pgoutput plugin:
// the inserts of the outbox table (written by outbox.EnqueueTx, through a
// publication of that table) and the logical decoding messages written by EmitTx
// (pg_logical_emit_message, no table row at all). It sends no query per message and
// polls nothing: the server pushes each committed transaction.
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
// # What the server needs
//
// wal_level = logical (a restart), a role with REPLICATION (or superuser), free
// max_replication_slots and max_wal_senders, and the outbox table. The relay
// creates the publication (inserts only) and the slot when missing; every setting
// it cannot work with is a *SetupError naming the fix, returned by Run without
// retrying. Slot names are the cluster's: one slot per outbox database.
//
// # What it costs
//
// A slot keeps the server's WAL from being recycled until the relay confirms it: a
// stopped relay fills the server's disk (the usual Debezium outage). The relay
// reports the retained WAL (idem_cdc_retained_wal_bytes) and warns above
// Config.RetainedWALWarn; DropSlot retires a slot for good. Rows written by
// EnqueueTx are not marked published: delete them on your schedule, or write with
// EmitTx (no rows; the messages exist only in the WAL, invisible to SQL and to the
// outbox Admin). Do not run the polling relay (outbox.Relay) on the same table: it
// would publish every message a second time.
package pgcdc
