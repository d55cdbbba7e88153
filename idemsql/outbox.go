package idemsql

// The outbox's contract with a database beyond its statements' text: the numbers
// the statements are written with, which package outbox decodes with.
const (
	// OutboxPartitions is how many ordering partitions the outbox has (outbox.Partitions):
	// a row's part is in [0, OutboxPartitions).
	OutboxPartitions = 64
	// OutboxMaxTextBytes bounds msg_id, topic and ordering_key as a claim reads them.
	OutboxMaxTextBytes = 64 << 10
	// OutboxMaxHeadersBytes bounds headers as a claim reads them. Payload's bound is
	// idem.MaxPayload.
	OutboxMaxHeadersBytes = 1 << 20
	// OutboxAuditMaxTextBytes bounds msg_id and topic as the audit reads them: a
	// longer one is no key of any inbox (idem.MaxKeyLen), read as NULL.
	OutboxAuditMaxTextBytes = 1024
)

// OutboxSQL is the outbox family of a Driver: every statement package outbox (and
// package audit) runs on the tables of the migration set "outbox" (idem_outbox,
// the messages; idem_outbox_discarded, the parked messages an operator gave up
// on; idem_outbox_cdc_parked, those the log-based relay parked;
// idem_outbox_relays, the relay instances; idem_outbox_repairs, the audit's
// repairs), with the arguments each takes, in order, and the columns each
// returns. Times are Unix milliseconds in BIGINT columns. A row is pending while
// published_at and parked_at are NULL.
//
// A relay's round takes ordering partitions before it reads their rows, so that
// one partition's messages are published by one relay at a time, in id order. How
// it takes them is the database's: SingleWriter (the whole database is the lock),
// LockPartitions (one statement locks some), or DueParts and LockParts (a table of
// partitions, locked row by row). A driver sets one of the three.
//
// Every claim (Claim, ClaimParts, ClaimPart, ClaimStrays) reads due rows in id
// order and returns the same columns, which package outbox decodes row by row:
// id, attempts, created_at, part, then msg_id, topic, ordering_key, headers and
// payload, each as two columns: its value when it is at most OutboxMaxTextBytes
// long (OutboxMaxHeadersBytes for headers, idem.MaxPayload for payload) and NULL
// when longer, then its length in bytes (octet_length). A row is due when it is
// pending, not backing off (attempts = 0 or available_at <= now), and no earlier
// pending row of its non-empty ordering_key is backing off (attempts > 0 and
// available_at > now). A claim's $1 is now and $2 its limit.
type OutboxSQL struct {
	// Insert is the statement a service in another language writes one message
	// with, in its own transaction (idem relay --schema prints it): msg_id, topic,
	// ordering_key, part, headers, payload, created_at (also written as
	// available_at).
	Insert string
	// WriterNote is what such a service must know beyond Insert on this
	// database, as SQL comments for idem relay --schema; "" for nothing.
	WriterNote string
	// InsertRows returns the statement that writes n messages (EnqueueTx), in the
	// order given, so that their ids follow it: $1 is now (created_at and
	// available_at), then each message's msg_id, topic, ordering_key, part,
	// headers and payload, from $2.
	InsertRows func(n int) string
	// MaxInsertRows bounds the n of InsertRows (0: no bound): more messages take
	// several statements. It keeps a statement's parameters under the database's
	// limit.
	MaxInsertRows int
	// InsertArrays, where the database takes arrays as parameters, writes a whole
	// batch in one statement, used instead of InsertRows: msg_ids, topics,
	// ordering_keys, parts, headers, payloads (text[], text[], text[], integer[],
	// text[], bytea[]), then now; rows in the arrays' order.
	InsertArrays string
	// InsertArraysNotify is InsertArrays that also wakes the relays at commit
	// (PostgreSQL's NOTIFY idem_outbox), in the same round trip; sent by at most
	// one transaction per outbox.Config.NotifyEvery.
	InsertArraysNotify string

	// SingleWriter says the database has one writer at a time (SQLite): a round
	// takes no partition, reads with Claim in a transaction, publishes with no
	// transaction open (which would stall every writer while the broker answers),
	// and marks each outcome in a transaction of its own. One relay per database.
	SingleWriter bool
	// Claim reads up to $2 due rows at $1 (SingleWriter).
	Claim string

	// LockPartitions locks, for the rest of the transaction, up to $2 partitions
	// that have pending rows not backing off at $1, skipping those another
	// transaction holds, and returns them (column: part). It should pick them at
	// random, so that relays spread over a backlog. Set with ClaimParts.
	LockPartitions string
	// ClaimParts reads up to $2 due rows at $1 of partitions $3 (integer[]) with
	// ids above $4. A round reads batch after batch of its partitions with it,
	// each after the last id of the one before.
	ClaimParts string

	// ReadCommittedClaims runs the rounds of DueParts and LockParts in READ
	// COMMITTED transactions (TxDB.InTxReadCommitted): MySQL's default REPEATABLE
	// READ would lock the gaps after the rows a claim reads, and producers
	// inserting there would wait for the publish.
	ReadCommittedClaims bool
	// DueParts lists the partitions that have pending rows, some of which may be
	// backing off (column: part), and -1 when a pending row's part is outside
	// [0, OutboxPartitions): no partition covers it.
	DueParts string
	// LockParts returns the statement that locks, for the rest of the
	// transaction, up to limit of the n partitions $1…$n, in partition order,
	// skipping those another transaction holds, and returns them (column: part).
	LockParts func(n, limit int) string
	// ClaimPart reads up to $2 due rows at $1 of partition $3, locking them.
	ClaimPart string
	// ClaimStrays reads up to $2 due rows at $1 whose part is outside [0,
	// OutboxPartitions), skipping those another transaction holds.
	ClaimStrays string

	// MarkPublished returns the statement that sets published_at = $1 of the n
	// rows whose ids are $2…$n+1.
	MarkPublished func(n int) string
	// MarkPublishedArray, where the database takes arrays as parameters, is
	// MarkPublished with the ids as one bigint[] ($2), used instead of it: one
	// statement text whatever the batch's size.
	MarkPublishedArray string
	// MarkPublishedIDs, where the database has a log-based relay (PostgreSQL:
	// idempg/pgcdc), sets published_at = $1 of the rows whose ids are in $2 (a
	// bigint[]) and whose published_at is NULL, leaving a row published already
	// as it was: that relay marks the rows the broker acknowledged, and marks
	// them again when it republishes them after a crash before its confirm, so
	// the first time stands (the audit pages on it). Parked or not, a given row
	// is marked. "" where no log-based relay runs.
	MarkPublishedIDs string
	// MarkFailed records a failed attempt of row $5: attempts = $1,
	// last_error = $2, available_at = $3, parked_at = $4 (NULL, or the time it was
	// parked).
	MarkFailed string

	// Stall returns two columns: 1 when a pending row exists, else 0, and the
	// newest published_at (NULL when none).
	Stall string
	// Backlog returns, over the unpublished rows, the count of those not parked,
	// the count of the parked ones not discarded, and the oldest created_at of
	// those not parked (NULL when none).
	Backlog string
	// Cleanup deletes up to $2 rows published before $1.
	Cleanup string

	// UpsertRelay writes relay instance $1's row: host $2, pid $3, started_at $4,
	// last_round_at $5, poll_interval_ms $6, published_total $7, last_error $8;
	// an existing row keeps its started_at and takes the other values.
	UpsertRelay string
	// DeleteRelay deletes relay instance $1's row.
	DeleteRelay string
	// ListRelays reads up to $2 relay rows that turned stale at $1 or later,
	// by instance: instance, host, pid, started_at, last_round_at,
	// poll_interval_ms, published_total, last_error. A row turns stale at
	// last_round_at + max(3 × poll_interval_ms, 30,000).
	ListRelays string
	// DeleteStaleRelays deletes the relay rows that turned stale (as in
	// ListRelays) before $1.
	DeleteStaleRelays string

	// StatusPartitions returns, per topic and part with unpublished rows, by topic
	// then part: topic, part, the count of those not parked, the count of the
	// parked ones, and the oldest created_at of those not parked (NULL when none).
	StatusPartitions string
	// StatusDiscarded returns, per topic and part, the count of the unpublished
	// rows that were discarded: topic, part, count.
	StatusDiscarded string

	// Every read of parked messages returns, per parked and unpublished row, in id
	// order: id, msg_id, topic, ordering_key, headers, payload, attempts,
	// last_error, parked_at, and its discard's time (NULL when none) and reason
	// ('' when none).

	// ParkedPending reads up to $1 parked messages that were not discarded.
	ParkedPending string
	// ParkedAfter reads up to $2 parked messages with ids above $1, discarded
	// ones included.
	ParkedAfter string

	// LockParked returns the id of row $1 when it is parked and unpublished (no
	// row otherwise), and holds the row until the transaction ends, so that a
	// Retry and a Discard of one message take turns. Without a lock clause on a
	// database whose transactions hold its write lock from BEGIN (SQLite).
	LockParked string
	// Discarded counts the discards of row $1 (0 or 1).
	Discarded string
	// Discard records that row $1 was discarded at $2 for reason $3, affecting
	// no row (without an error) when it was already.
	Discard string
	// Retry puts parked row $2 back in line: parked_at NULL, attempts 0,
	// available_at $1.
	Retry string

	// Park parks unpublished row $3 at $1 with last_error $2, counting an attempt.
	Park string
	// InsertParked writes a message as a new row, parked at once: msg_id, topic,
	// ordering_key, part, headers, payload, the time (created_at, available_at
	// and parked_at), last_error; attempts 1. It returns the new row's id, unless
	// LastInsertID is set.
	InsertParked string
	// LastInsertID, where InsertParked cannot return the id (MySQL has no
	// RETURNING), reads it after InsertParked.
	LastInsertID string
	// MarkCDCParked records that row $1 was parked by the log-based relay,
	// affecting no row (without an error) when it is recorded already.
	MarkCDCParked string
	// CDCParked counts the records of row $1 (0 or 1) MarkCDCParked wrote.
	CDCParked string
	// Reinsert writes a copy of row $2 as a new pending row, created and
	// available at $1, its attempts 0 (Retry of a row the log-based relay
	// parked: it reads inserts only).
	Reinsert string
	// DeleteRow deletes row $1 (after Reinsert).
	DeleteRow string
	// UnmarkCDCParked deletes MarkCDCParked's record of row $1.
	UnmarkCDCParked string

	// The audit's statements (package audit): it reads the published messages
	// of a window, and repairs a message a consumer never got by publishing a
	// copy of its row under the same msg_id, recorded in idem_outbox_repairs.

	// AuditPublished reads up to $4 published messages (published_at NOT NULL)
	// in keyset order (published_at, id): those after ($1, $2) — published_at >
	// $1, or published_at = $1 and id > $2 — and published before $3. One index
	// range scan per page: an index on (published_at, id) of the published rows
	// (idem_outbox_published_id; on MySQL and SQLite an index on published_at,
	// whose entries carry the row id). Returns id, msg_id (NULL when longer
	// than OutboxAuditMaxTextBytes), topic (likewise), created_at,
	// published_at, and the id of the row it repairs when the row is a
	// repair's copy (NULL otherwise; from idem_outbox_repairs.copy_id).
	AuditPublished string
	// RepairCopy writes a copy of published row $2 as a new pending row (msg_id,
	// topic, ordering_key, part, headers and payload as they are; created_at
	// and available_at $1, attempts 0), and returns the new row's id unless
	// LastInsertID is set; it writes nothing when row $2 is not published.
	RepairCopy string
	// LockPublished returns the id of row $1 when it is published (no row
	// otherwise), and holds the row until the transaction ends, so that two
	// audits repairing one message take turns: the second then finds the first
	// one's repair (RepairsOf) and leaves it. Without a lock clause on a database
	// whose transactions hold its write lock from BEGIN (SQLite).
	LockPublished string
	// RecordRepair records a repair, in RepairCopy's transaction: copy_id,
	// orig_id, msg_id, topic, consumers (the consumers that missed it,
	// comma-separated), reason, repaired_at.
	RecordRepair string
	// RepairsOf returns the statement reading the repairs of n original rows,
	// $1..$n: orig_id, the number of its repairs, the latest repaired_at. One
	// row per original that has repairs; an index on orig_id serves it.
	RepairsOf func(n int) string
	// Repairs reads up to $2 recorded repairs with copy_id below $1, newest
	// first: copy_id, orig_id, msg_id, topic, consumers, reason, repaired_at.
	Repairs string
}
