package idemsqlite

import (
	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/internal/queuesql"
)

func (driver) Queue() *idemsql.QueueSQL { return &queueStmts }

// queueStmts are the common statements on SQLite's single writer: the claim's
// transaction holds the whole database, so it locks no row.
var queueStmts = func() idemsql.QueueSQL {
	s := queuesql.Common()
	s.Claim = `UPDATE idem_queue SET attempts = attempts + 1, available_at = $2, leased_by = $3
WHERE id IN (SELECT c.id FROM idem_queue c WHERE ` + queuesql.Due("$1", "$4") + `
	ORDER BY c.available_at, c.id LIMIT $5)
RETURNING id, attempts, ` + queuesql.Returned("")
	return s
}()
