package idempg

import (
	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/internal/outboxsql"
)

func (driver) Outbox() *idemsql.OutboxSQL { return &outboxStmts }

// outboxStmts are the common statements with PostgreSQL's arrays (a batch is one
// statement text whatever its size, to prepare and cache once), its NOTIFY, and
// partitions taken with advisory locks.
var outboxStmts = func() idemsql.OutboxSQL {
	s := outboxsql.Common()
	s.WriterNote = `-- PostgreSQL: then, in the same transaction, wake the relays at commit:
SELECT pg_notify('idem_outbox', '');`
	s.InsertArrays = outboxInsertArrays
	s.InsertArraysNotify = `WITH ins AS (` + outboxInsertArrays + `
	RETURNING 1)
SELECT pg_notify('idem_outbox', '') FROM (SELECT 1 FROM ins LIMIT 1) AS any_row`
	s.LockPartitions = outboxLockPartitions
	// No FOR UPDATE: the partition locks already keep other relays off these rows,
	// nothing else writes a pending row that is not parked (Admin's Retry and
	// Discard take parked rows, cleanup published ones), and the read's snapshot,
	// taken after the locks, sees every mark of the partitions' previous holders. A
	// row lock would write each row (and WAL) once more before the mark.
	s.ClaimParts = outboxsql.Due + `
  AND o.part = ANY($3::int[]) AND o.id > $4
ORDER BY o.id LIMIT $2`
	s.MarkPublishedArray = "UPDATE idem_outbox SET published_at = $1 WHERE id = ANY($2::bigint[])"
	s.MarkPublishedIDs = "UPDATE idem_outbox SET published_at = $1 WHERE id = ANY($2::bigint[]) AND published_at IS NULL"
	return s
}()

const outboxInsertArrays = `INSERT INTO idem_outbox (msg_id, topic, ordering_key, part, headers, payload, created_at, available_at)
	SELECT m.id, m.topic, m.ok, m.part, m.headers, m.payload, $7, $7
	FROM unnest($1::text[], $2::text[], $3::text[], $4::integer[], $5::text[], $6::bytea[]) WITH ORDINALITY AS m(id, topic, ok, part, headers, payload, ord)
	ORDER BY m.ord`

// outboxLockPartitions locks some ordering partitions that have due rows, at random
// so that relays spread over them; a round reads rows of the partitions it holds
// only then: a row is read only when no other relay can publish its partition, and
// the earliest pending row of each held partition is visible to the read. (Locking
// the partition row by row inside one scan would not do: a scan that skipped a
// partition held by a relay that then rolled back could take the partition's later
// rows.) The locks are keyed by the schema too, so outboxes in two schemas of one
// database do not hold each other back.
//
// The partitions with due rows are found by skipping through idem_outbox_part in
// partition order, one LIMIT 1 read per partition: at most 64 index probes whatever
// the backlog. (An EXISTS per partition let the planner hash every pending row each
// round, or walk idem_outbox_pending, dead entries of just-published rows included,
// once per partition.) OFFSET 0 keeps the lock out of the random ordering, so only
// the partitions returned are locked: pushed below the sort, it locked them all.
const outboxLockPartitions = `WITH RECURSIVE due AS (
	(SELECT o.part FROM idem_outbox o
	WHERE o.published_at IS NULL AND o.parked_at IS NULL AND ` + outboxsql.NotBackingOff + ` ORDER BY o.part LIMIT 1)
	UNION ALL
	SELECT (SELECT o.part FROM idem_outbox o WHERE o.part > due.part
		AND o.published_at IS NULL AND o.parked_at IS NULL AND ` + outboxsql.NotBackingOff + ` ORDER BY o.part LIMIT 1)
	FROM due WHERE due.part IS NOT NULL)
SELECT part FROM (SELECT part FROM due WHERE part IS NOT NULL ORDER BY random() OFFSET 0) s
WHERE pg_try_advisory_xact_lock(hashtext('idem_outbox:' || current_schema()), part) LIMIT $2`
