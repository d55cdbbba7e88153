// Package outboxsql holds the outbox statements idem's drivers share
// (idemsql.OutboxSQL): Common, the statements most databases speak alike, which
// each driver copies and then changes where its own differs, and the claim's
// select and due condition that every driver's claims extend.
package outboxsql

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemsql"
)

// boundedCol selects column c of o when it is at most max bytes long (NULL
// otherwise), then its length. octet_length counts bytes on PostgreSQL, MySQL,
// MariaDB and SQLite alike. Checking the size in the query, before the value is
// read, makes a row holding a gigabyte of headers cost the relay its length, not
// its bytes.
func boundedCol(c string, max int) string {
	return fmt.Sprintf("CASE WHEN octet_length(o.%[1]s) <= %[2]d THEN o.%[1]s END, octet_length(o.%[1]s)", c, max)
}

// NotBackingOff holds for a row of o that never failed, or whose backoff ended by
// $1. Only rows that failed before can be backing off (attempts > 0): the relay
// alone sets a future available_at, so that of a row it never tried is not read,
// and a producer whose clock is ahead, or who wrote microseconds, does not hold
// its row back.
const NotBackingOff = `(o.attempts = 0 OR o.available_at <= $1)`

// Due reads the claim's columns (see idemsql.OutboxSQL) of the due rows of
// idem_outbox o; a claim adds its conditions (AND …), its ORDER BY and LIMIT. A
// row is due when it is pending, not backing off, and no earlier row of its
// ordering key is backing off (which would let it overtake). The partial index
// idem_outbox_failing holds just the rows with attempts, so the check costs a
// probe of a nearly empty index.
var Due = "SELECT o.id, o.attempts, o.created_at, o.part, " + boundedCol("msg_id", idemsql.OutboxMaxTextBytes) + ", " +
	boundedCol("topic", idemsql.OutboxMaxTextBytes) + ", " + boundedCol("ordering_key", idemsql.OutboxMaxTextBytes) + ", " +
	boundedCol("headers", idemsql.OutboxMaxHeadersBytes) + ", " + boundedCol("payload", idem.MaxPayload) + `
FROM idem_outbox o
WHERE o.published_at IS NULL AND o.parked_at IS NULL AND ` + NotBackingOff + `
  AND (o.ordering_key = '' OR NOT EXISTS (SELECT 1 FROM idem_outbox e
       WHERE e.ordering_key = o.ordering_key AND e.id < o.id AND e.attempts > 0
         AND e.published_at IS NULL AND e.parked_at IS NULL AND e.available_at > $1))`

// PartitionsMax is the highest partition, as SQL text.
var PartitionsMax = strconv.Itoa(idemsql.OutboxPartitions - 1)

// Placeholders returns "$from, $from+1, …", n of them.
func Placeholders(from, n int) string {
	var b strings.Builder
	for i := range n {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString("$" + strconv.Itoa(from+i))
	}
	return b.String()
}

// insertRows writes n messages, now in $1.
func insertRows(n int) string {
	var b strings.Builder
	b.WriteString(`INSERT INTO idem_outbox (msg_id, topic, ordering_key, part, headers, payload, created_at, available_at) VALUES `)
	for i := range n {
		if i > 0 {
			b.WriteString(", ")
		}
		k := 2 + 6*i
		fmt.Fprintf(&b, "($%d, $%d, $%d, $%d, $%d, $%d, $1, $1)", k, k+1, k+2, k+3, k+4, k+5)
	}
	return b.String()
}

func markPublished(n int) string {
	return "UPDATE idem_outbox SET published_at = $1 WHERE id IN (" + Placeholders(2, n) + ")"
}

// staleAt is when a relay's row turns stale, in Unix milliseconds: 3 poll intervals
// or 30 s after its last round, whichever is longer (outbox's staleAfter).
const staleAt = `last_round_at + CASE WHEN 3 * poll_interval_ms > 30000 THEN 3 * poll_interval_ms ELSE 30000 END`

// parked reads parked messages with their discard; the conditions on o, ORDER BY
// and LIMIT follow.
const parked = `SELECT o.id, o.msg_id, o.topic, o.ordering_key, o.headers, o.payload,
	o.attempts, o.last_error, o.parked_at, x.discarded_at, COALESCE(x.reason, '')
	FROM idem_outbox o LEFT JOIN idem_outbox_discarded x ON x.id = o.id
	WHERE o.parked_at IS NOT NULL AND o.published_at IS NULL `

// InsertParked is OutboxSQL.InsertParked without its RETURNING.
const InsertParked = `INSERT INTO idem_outbox (msg_id, topic, ordering_key, part, headers, payload, created_at, available_at,
	attempts, last_error, parked_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $7, 1, $8, $7)`

// AuditCols are the columns AuditPublished reads of idem_outbox o and
// idem_outbox_repairs r (joined on the copy's id), up to its FROM.
var AuditCols = "SELECT o.id, " + auditText("msg_id") + ", " + auditText("topic") + `, o.created_at, o.published_at, r.orig_id
	FROM idem_outbox o LEFT JOIN idem_outbox_repairs r ON r.copy_id = o.id`

// auditText selects column c of o when it is at most OutboxAuditMaxTextBytes
// long, NULL otherwise.
func auditText(c string) string {
	return fmt.Sprintf("CASE WHEN octet_length(o.%[1]s) <= %[2]d THEN o.%[1]s END", c, idemsql.OutboxAuditMaxTextBytes)
}

// RepairCopy is OutboxSQL.RepairCopy without its RETURNING.
const RepairCopy = `INSERT INTO idem_outbox (msg_id, topic, ordering_key, part, headers, payload, created_at, available_at)
	SELECT msg_id, topic, ordering_key, part, headers, payload, $1, $1 FROM idem_outbox WHERE id = $2 AND published_at IS NOT NULL`

// repairsOf reads the repairs of n original rows, $1..$n, from the index
// idem_outbox_repairs_orig (orig_id, repaired_at) alone.
func repairsOf(n int) string {
	return "SELECT orig_id, COUNT(*), MAX(repaired_at) FROM idem_outbox_repairs WHERE orig_id IN (" +
		Placeholders(1, n) + ") GROUP BY orig_id"
}

// Common returns the outbox statements most databases speak alike, without those
// of a round's partitions (each database takes them its own way). A conflict is
// ON CONFLICT, a new row's id comes from RETURNING, and LockParked locks FOR
// UPDATE.
func Common() idemsql.OutboxSQL {
	return idemsql.OutboxSQL{
		Insert: `INSERT INTO idem_outbox (msg_id, topic, ordering_key, part, headers, payload, created_at, available_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $7)`,
		// 6 parameters a row stay far below SQLite's and MySQL's limits (32,766 and 65,535).
		InsertRows:    insertRows,
		MaxInsertRows: 500,

		MarkPublished: markPublished,
		MarkFailed:    `UPDATE idem_outbox SET attempts = $1, last_error = $2, available_at = $3, parked_at = $4 WHERE id = $5`,

		// Counts up to one pending row (idem_outbox_pending) and reads the newest
		// publication (idem_outbox_published_id on PostgreSQL,
		// idem_outbox_published elsewhere).
		Stall: `SELECT
	(SELECT COUNT(*) FROM (SELECT 1 FROM idem_outbox WHERE published_at IS NULL AND parked_at IS NULL LIMIT 1) w),
	(SELECT MAX(published_at) FROM idem_outbox WHERE published_at IS NOT NULL)`,
		Backlog: `SELECT
			COUNT(CASE WHEN parked_at IS NULL THEN 1 END),
			COUNT(CASE WHEN parked_at IS NOT NULL AND NOT EXISTS (
				SELECT 1 FROM idem_outbox_discarded x WHERE x.id = idem_outbox.id) THEN 1 END),
			MIN(CASE WHEN parked_at IS NULL THEN created_at END)
			FROM idem_outbox WHERE published_at IS NULL`,
		Cleanup: `DELETE FROM idem_outbox WHERE id IN (
		SELECT id FROM idem_outbox WHERE published_at IS NOT NULL AND published_at < $1 LIMIT $2)`,

		UpsertRelay: `INSERT INTO idem_outbox_relays
			(instance, host, pid, started_at, last_round_at, poll_interval_ms, published_total, last_error)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT (instance) DO UPDATE SET host = excluded.host, pid = excluded.pid,
		last_round_at = excluded.last_round_at, poll_interval_ms = excluded.poll_interval_ms,
		published_total = excluded.published_total, last_error = excluded.last_error`,
		DeleteRelay: "DELETE FROM idem_outbox_relays WHERE instance = $1",
		ListRelays: `SELECT instance, host, pid, started_at, last_round_at, poll_interval_ms, published_total, last_error
		FROM idem_outbox_relays WHERE ` + staleAt + ` >= $1 ORDER BY instance LIMIT $2`,
		DeleteStaleRelays: "DELETE FROM idem_outbox_relays WHERE " + staleAt + " < $1",

		// The counts read the index idem_outbox_backlog, which holds only unpublished rows.
		StatusPartitions: `SELECT topic, part, COUNT(CASE WHEN parked_at IS NULL THEN 1 END),
			COUNT(CASE WHEN parked_at IS NOT NULL THEN 1 END), MIN(CASE WHEN parked_at IS NULL THEN created_at END)
			FROM idem_outbox WHERE published_at IS NULL GROUP BY topic, part ORDER BY topic, part`,
		// Discarded messages are parked ones with a row in idem_outbox_discarded: few.
		StatusDiscarded: `SELECT o.topic, o.part, COUNT(*) FROM idem_outbox_discarded x
			JOIN idem_outbox o ON o.id = x.id WHERE o.published_at IS NULL GROUP BY o.topic, o.part`,
		ParkedPending: parked + "AND x.id IS NULL ORDER BY o.id LIMIT $1",
		ParkedAfter:   parked + "AND o.id > $1 ORDER BY o.id LIMIT $2",

		LockParked: "SELECT id FROM idem_outbox WHERE id = $1 AND parked_at IS NOT NULL AND published_at IS NULL FOR UPDATE",
		Discarded:  "SELECT COUNT(*) FROM idem_outbox_discarded WHERE id = $1",
		Discard:    "INSERT INTO idem_outbox_discarded (id, discarded_at, reason) VALUES ($1, $2, $3) ON CONFLICT (id) DO NOTHING",
		Retry:      `UPDATE idem_outbox SET parked_at = NULL, attempts = 0, available_at = $1 WHERE id = $2`,

		Park: `UPDATE idem_outbox SET parked_at = $1, last_error = $2, attempts = attempts + 1
			WHERE id = $3 AND published_at IS NULL`,
		InsertParked:  InsertParked + " RETURNING id",
		MarkCDCParked: "INSERT INTO idem_outbox_cdc_parked (id) VALUES ($1) ON CONFLICT (id) DO NOTHING",
		CDCParked:     "SELECT COUNT(*) FROM idem_outbox_cdc_parked WHERE id = $1",
		Reinsert: `INSERT INTO idem_outbox (msg_id, topic, ordering_key, part, headers, payload, created_at, available_at)
		SELECT msg_id, topic, ordering_key, part, headers, payload, $1, $1 FROM idem_outbox WHERE id = $2`,
		DeleteRow:       "DELETE FROM idem_outbox WHERE id = $1",
		UnmarkCDCParked: "DELETE FROM idem_outbox_cdc_parked WHERE id = $1",

		// A row value compared with the keyset: one seek of
		// idem_outbox_published_id (PostgreSQL) or idem_outbox_published (SQLite,
		// whose entries end with the rowid, id) to the page's first row, then
		// the index in order until the LIMIT. published_at IS NOT NULL, a term
		// of its own, lets a partial index of the published rows serve.
		AuditPublished: AuditCols + `
	WHERE o.published_at IS NOT NULL AND (o.published_at, o.id) > ($1, $2) AND o.published_at < $3
	ORDER BY o.published_at, o.id LIMIT $4`,
		RepairCopy: RepairCopy + " RETURNING id",
		RecordRepair: `INSERT INTO idem_outbox_repairs (copy_id, orig_id, msg_id, topic, consumers, reason, repaired_at)
	VALUES ($1, $2, $3, $4, $5, $6, $7)`,
		RepairsOf: repairsOf,
		Repairs: `SELECT copy_id, orig_id, msg_id, topic, consumers, reason, repaired_at FROM idem_outbox_repairs
	WHERE copy_id < $1 ORDER BY copy_id DESC LIMIT $2`,
	}
}
