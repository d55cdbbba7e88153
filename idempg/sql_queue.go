package idempg

import (
	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/internal/queuesql"
)

func (driver) Queue() *idemsql.QueueSQL { return &queueStmts }

// queueStmts are the common statements with PostgreSQL's arrays (a batch is one
// statement text whatever its size), its NOTIFY, and a claim that locks its rows
// FOR UPDATE SKIP LOCKED, so that claimers pass each other.
var queueStmts = func() idemsql.QueueSQL {
	s := queuesql.Common()
	s.InsertArrays = queueInsertArrays
	s.InsertArraysNotify = `WITH ins AS (` + queueInsertArrays + `)
SELECT ins.topic, ins.msg_id FROM ins CROSS JOIN (SELECT pg_notify('` + idemsql.QueueNotifyChannel + `', '')) AS n`
	s.Claim = `WITH due AS (
	SELECT c.id FROM idem_queue c WHERE ` + queuesql.Due("$1", "$4") + `
	ORDER BY c.available_at, c.id LIMIT $5
	FOR UPDATE SKIP LOCKED)
UPDATE idem_queue q SET attempts = q.attempts + 1, available_at = $2, leased_by = $3
FROM due WHERE q.id = due.id
RETURNING q.id, q.attempts, ` + queuesql.Returned("q")
	// RetireArrays and ExtendArrays reach their rows by the primary key in any
	// plan: q.id = ANY beside the join, and the unfinished test written as
	// num_nulls(q.finished_at) = 1, which is finished_at IS NULL to the rows but
	// not to the planner. Written IS NULL, it lets the generic plan cached on a
	// new table (see GroupLook in sql_effect.go) read the whole partial index of
	// unfinished rows, the backlog, for every batch.
	s.RetireArrays = `UPDATE idem_queue q SET finished_at = $1, outcome = $2, leased_by = ''
FROM unnest($3::bigint[], $4::integer[]) AS h(id, attempts)
WHERE q.id = ANY($3::bigint[]) AND q.id = h.id AND q.attempts = h.attempts AND num_nulls(q.finished_at) = 1`
	s.ExtendArrays = `UPDATE idem_queue q SET available_at = $1
FROM unnest($2::bigint[], $3::integer[]) AS h(id, attempts)
WHERE q.id = ANY($2::bigint[]) AND q.id = h.id AND q.attempts = h.attempts AND num_nulls(q.finished_at) = 1`
	return s
}()

// queueInsertArrays writes a batch from one array per column, in the arrays'
// order, skipping duplicates, and returns what it wrote.
const queueInsertArrays = `INSERT INTO idem_queue (msg_id, topic, ordering_key, headers, payload, available_at, created_at)
	SELECT m.id, m.topic, m.ok, m.headers, m.payload, m.at, $7
	FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::bytea[], $6::bigint[]) WITH ORDINALITY AS m(id, topic, ok, headers, payload, at, ord)
	ORDER BY m.ord
	ON CONFLICT (topic, msg_id) WHERE finished_at IS NULL DO NOTHING
	RETURNING topic, msg_id`
