// Package queuesql holds the queue statements idem's drivers share
// (idemsql.QueueSQL): Common, the statements the databases speak alike, which
// each driver copies and then changes where its own differs, and the pieces of
// the claim every driver's claim is built from.
package queuesql

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemsql"
)

// bounded selects column c of alias a when it is at most max bytes long (NULL
// otherwise), then its length: a foreign row holding a gigabyte of payload costs
// a claim its length, not its bytes.
func bounded(a, c string, max int) string {
	return fmt.Sprintf("CASE WHEN octet_length(%[1]s%[2]s) <= %[3]d THEN %[1]s%[2]s END, octet_length(%[1]s%[2]s)", a, c, max)
}

// Returned is the claim's columns (see idemsql.QueueSQL) of alias a, after the
// attempts column, which each claim writes its own way; "" for no alias
// (SQLite's RETURNING takes none).
func Returned(a string) string {
	if a != "" {
		a += "."
	}
	return a + "created_at, " + a + "msg_id, " + a + "ordering_key, " +
		bounded(a, "headers", idemsql.OutboxMaxHeadersBytes) + ", " + bounded(a, "payload", idem.MaxPayload)
}

// Due is the condition on row c of idem_queue that makes it due at now (a
// placeholder) in topic (another): unfinished, available, and first of its
// ordering key among the unfinished rows. The partial index idem_queue_key makes
// the ordering check one probe.
func Due(now, topic string) string {
	return `c.topic = ` + topic + ` AND c.finished_at IS NULL AND c.available_at <= ` + now + `
	AND (c.ordering_key = '' OR NOT EXISTS (SELECT 1 FROM idem_queue e WHERE e.topic = c.topic
		AND e.ordering_key = c.ordering_key AND e.finished_at IS NULL AND e.ordering_key <> '' AND e.id < c.id))`
}

// Columns is what every listing returns (see idemsql.QueueSQL).
const Columns = `id, msg_id, topic, ordering_key, attempts, created_at, available_at, leased_by, last_error, finished_at, outcome`

// Pairs returns "id IN ($f, $f+2, …) AND (id, attempts) IN (($f, $f+1), …)"
// for n (id, attempts) pairs from placeholder $f: the id list lets every
// database find the rows by primary key, the pairs fence them.
func Pairs(f, n int) string {
	var ids, pairs strings.Builder
	for i := range n {
		if i > 0 {
			ids.WriteString(", ")
			pairs.WriteString(", ")
		}
		p := f + 2*i
		ids.WriteString("$" + strconv.Itoa(p))
		fmt.Fprintf(&pairs, "($%d, $%d)", p, p+1)
	}
	return "id IN (" + ids.String() + ") AND (id, attempts) IN (" + pairs.String() + ")"
}

// Common returns the statements PostgreSQL, SQLite and MySQL speak alike; a
// driver sets the claim and changes what its database says otherwise.
func Common() idemsql.QueueSQL {
	return idemsql.QueueSQL{
		Insert: `INSERT INTO idem_queue (msg_id, topic, ordering_key, headers, payload, created_at, available_at)
	VALUES ($1, $2, $3, $4, $5, $6, $7)
	ON CONFLICT (topic, msg_id) WHERE finished_at IS NULL DO NOTHING`,
		Retire: func(n int) string {
			return `UPDATE idem_queue SET finished_at = $1, outcome = $2, leased_by = '' WHERE finished_at IS NULL AND ` + Pairs(3, n)
		},
		Nak: `UPDATE idem_queue SET available_at = $1, leased_by = '', last_error = $2 WHERE id = $3 AND attempts = $4 AND finished_at IS NULL`,
		Extend: func(n int) string {
			return `UPDATE idem_queue SET available_at = $1 WHERE finished_at IS NULL AND ` + Pairs(2, n)
		},
		Finish: `UPDATE idem_queue SET finished_at = $1, outcome = $2, last_error = $3, leased_by = '' WHERE id = $4 AND attempts = $5 AND finished_at IS NULL`,
		Cancel: `UPDATE idem_queue SET finished_at = $1, outcome = '` + idemsql.QueueCancelled + `', last_error = $2, leased_by = ''
	WHERE topic = $3 AND msg_id = $4 AND finished_at IS NULL`,
		Sweep: `DELETE FROM idem_queue WHERE id IN (SELECT id FROM idem_queue WHERE finished_at < $1 LIMIT $2)`,
		Lag:   `SELECT count(*) FROM idem_queue WHERE topic = $1 AND finished_at IS NULL`,
		Status: `SELECT topic,
	SUM(CASE WHEN available_at <= $1 THEN 1 ELSE 0 END),
	SUM(CASE WHEN available_at > $1 AND leased_by <> '' THEN 1 ELSE 0 END),
	SUM(CASE WHEN available_at > $1 AND leased_by = '' AND attempts > 0 THEN 1 ELSE 0 END),
	SUM(CASE WHEN available_at > $1 AND leased_by = '' AND attempts = 0 THEN 1 ELSE 0 END),
	MIN(CASE WHEN available_at <= $1 THEN created_at END)
FROM idem_queue WHERE finished_at IS NULL GROUP BY topic ORDER BY topic`,
		ListUnfinished: `SELECT ` + Columns + ` FROM idem_queue
	WHERE finished_at IS NULL AND id > $2 AND ($1 = '' OR topic = $1) ORDER BY id LIMIT $3`,
		ListFinished: `SELECT ` + Columns + ` FROM idem_queue
	WHERE finished_at IS NOT NULL AND id < $2 AND ($1 = '' OR topic = $1) ORDER BY id DESC LIMIT $3`,
		PeriodicEnsure:  `INSERT INTO idem_queue_periodic (name, last_tick) VALUES ($1, 0) ON CONFLICT (name) DO NOTHING`,
		PeriodicAdvance: `UPDATE idem_queue_periodic SET last_tick = $1 WHERE name = $2 AND last_tick < $1`,
	}
}
