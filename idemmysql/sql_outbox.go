package idemmysql

import (
	"fmt"

	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/internal/outboxsql"
)

func (driver) Outbox() *idemsql.OutboxSQL { return &outboxStmts }

// outboxStmts are the common statements in MySQL's words (ON DUPLICATE KEY, no
// RETURNING, a DELETE that limits itself), with partitions taken as rows of
// idem_outbox_parts, locked FOR UPDATE SKIP LOCKED in READ COMMITTED transactions.
var outboxStmts = func() idemsql.OutboxSQL {
	s := outboxsql.Common()
	s.WriterNote = `-- MySQL/MariaDB: the same statement with ? placeholders, created_at's value
-- passed twice:
--   VALUES (?, ?, ?, ?, ?, ?, ?, ?)
-- MySQL has no notifications: the relay finds the row within its --poll interval.`

	s.ReadCommittedClaims = true
	// Lists the partitions with pending rows, one index probe each (the LIMIT keeps
	// MySQL from reading every pending row to answer).
	s.DueParts = `SELECT p.part FROM idem_outbox_parts p WHERE (SELECT 1 FROM idem_outbox o
		WHERE o.published_at IS NULL AND o.parked_at IS NULL AND o.part = p.part LIMIT 1) IS NOT NULL
	UNION ALL SELECT -1 FROM (SELECT 1 FROM idem_outbox o WHERE o.published_at IS NULL AND o.parked_at IS NULL
		AND (o.part < 0 OR o.part > ` + outboxsql.PartitionsMax + `) LIMIT 1) s`
	// In the index's order, so that it locks only the rows it returns.
	s.LockParts = func(n, limit int) string {
		return fmt.Sprintf("SELECT part FROM idem_outbox_parts WHERE part IN (%s) ORDER BY part LIMIT %d FOR UPDATE SKIP LOCKED",
			outboxsql.Placeholders(1, n), limit)
	}
	s.ClaimPart = outboxsql.Due + `
  AND o.part = $3
ORDER BY o.id LIMIT $2 FOR UPDATE`
	// Rows written by hand with a part out of range, which no row of
	// idem_outbox_parts covers: they fail to decode and are parked, where without
	// this read they would wait unseen forever. Nothing orders them, so two relays
	// skip each other's.
	s.ClaimStrays = outboxsql.Due + `
  AND (o.part < 0 OR o.part > ` + outboxsql.PartitionsMax + `)
ORDER BY o.id LIMIT $2 FOR UPDATE SKIP LOCKED`

	// MySQL can neither limit an IN subquery nor read the table it deletes from in
	// one, but limits DELETE itself.
	s.Cleanup = `DELETE FROM idem_outbox WHERE published_at IS NOT NULL AND published_at < $1 ORDER BY published_at LIMIT $2`
	s.UpsertRelay = `INSERT INTO idem_outbox_relays
			(instance, host, pid, started_at, last_round_at, poll_interval_ms, published_total, last_error)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON DUPLICATE KEY UPDATE host = VALUES(host), pid = VALUES(pid), last_round_at = VALUES(last_round_at),
		poll_interval_ms = VALUES(poll_interval_ms), published_total = VALUES(published_total), last_error = VALUES(last_error)`
	s.Discard = "INSERT INTO idem_outbox_discarded (id, discarded_at, reason) VALUES ($1, $2, $3) ON DUPLICATE KEY UPDATE id = id"
	s.MarkCDCParked = "INSERT INTO idem_outbox_cdc_parked (id) VALUES ($1) ON DUPLICATE KEY UPDATE id = id"
	s.InsertParked = outboxsql.InsertParked
	s.LastInsertID = "SELECT LAST_INSERT_ID()"

	// The keyset as a range of published_at and a condition on its first value:
	// MySQL's range optimizer reads no range of a row value. The entries of
	// idem_outbox_published (published_at) end with the primary key, id, so the
	// range comes in the page's order and the LIMIT ends the read.
	s.AuditPublished = outboxsql.AuditCols + `
	WHERE o.published_at >= $1 AND o.published_at < $3 AND (o.published_at > $1 OR o.id > $2)
	ORDER BY o.published_at, o.id LIMIT $4`
	s.RepairCopy = outboxsql.RepairCopy
	return s
}()
