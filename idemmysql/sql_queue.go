package idemmysql

import (
	"strconv"
	"strings"

	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/internal/queuesql"
)

func (driver) Queue() *idemsql.QueueSQL { return &queueStmts }

// queueStmts are the common statements in MySQL's words: no partial index (the
// unique key is on a generated column that is NULL once a row is finished), no
// RETURNING (a claim locks its rows FOR UPDATE SKIP LOCKED, then leases them), a
// DELETE that limits itself.
var queueStmts = func() idemsql.QueueSQL {
	s := queuesql.Common()
	s.Insert = `INSERT INTO idem_queue (msg_id, topic, ordering_key, headers, payload, created_at, available_at)
	VALUES ($1, $2, $3, $4, $5, $6, $7)
	ON DUPLICATE KEY UPDATE id = id`
	s.ClaimLock = `SELECT c.id, c.attempts + 1, ` + queuesql.Returned("c") + `
FROM idem_queue c WHERE ` + queuesql.Due("$1", "$2") + `
ORDER BY c.available_at, c.id LIMIT $3
FOR UPDATE SKIP LOCKED`
	s.ClaimMark = func(n int) string {
		ids := make([]string, n)
		for i := range ids {
			ids[i] = "$" + strconv.Itoa(i+3)
		}
		return `UPDATE idem_queue SET attempts = attempts + 1, available_at = $1, leased_by = $2 WHERE id IN (` + strings.Join(ids, ", ") + `)`
	}
	s.Cancel = `UPDATE idem_queue SET finished_at = $1, outcome = '` + idemsql.QueueCancelled + `', last_error = $2, leased_by = ''
	WHERE topic = $3 AND unfinished_msg_id = $4`
	s.Sweep = `DELETE FROM idem_queue WHERE finished_at < $1 LIMIT $2`
	s.PeriodicEnsure = `INSERT INTO idem_queue_periodic (name, last_tick) VALUES ($1, 0) ON DUPLICATE KEY UPDATE name = name`
	return s
}()
