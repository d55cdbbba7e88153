package idemsqlite

import (
	"time"

	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/idemsql/sqlstore"
	"github.com/idemhq/idem/internal/recordsql"
)

func (driver) Records() *idemsql.RecordsSQL { return &recordsStmts }

// sharedRecords is what the store embeds to be sqlstore's Inspector and
// ScopeLister; the alias keeps the embedded field unexported.
type sharedRecords = sqlstore.Records

// recordColumns are the record columns of idemsql.RecordsSQL.
const recordColumns = `state, fingerprint, token, result, created_ns, expires_ns`

// recordsStmts is SQLite's records family. The claim path's statements, and the
// sweep (the single writer's, by the store's clock), are the store's own
// (records.go). The table's name is fixed: {{table}} is always idem_records.
var recordsStmts = idemsql.RecordsSQL{
	TimeUnit: time.Nanosecond,
	Inspect:  `SELECT ` + recordColumns + ` FROM "{{table}}" WHERE scope = $1 AND id = $2`,
	// A range of the primary-key b-tree (WITHOUT ROWID: the table itself), in its
	// BINARY collation: ids in ascending byte order.
	List: `SELECT id, ` + recordColumns + ` FROM "{{table}}" WHERE scope = $1 AND id > $2 ORDER BY id LIMIT $3`,
	// Each step is one seek of the b-tree to the first scope above the last one
	// (the scalar subquery), and the LIMIT ends the recursion. Scopes come in the
	// BINARY collation: ascending byte order. See TestScopesPlanSeeksPrimaryKey.
	Scopes: `WITH RECURSIVE s(scope) AS (
	SELECT (SELECT scope FROM "{{table}}" WHERE scope > $1 ORDER BY scope LIMIT 1)
	UNION ALL
	SELECT (SELECT scope FROM "{{table}}" WHERE scope > s.scope ORDER BY scope LIMIT 1)
	FROM s WHERE s.scope IS NOT NULL
	LIMIT $2
)
SELECT scope FROM s WHERE scope IS NOT NULL`,
	// Tokens come from idem_meta's floor, which never falls, so the key's next
	// claim gets a token above the evicted holder's.
	Evict: `DELETE FROM "{{table}}" WHERE scope = $1 AND id = $2 AND (state = 2 OR $3)
		RETURNING ` + recordColumns,
	State: `SELECT state FROM "{{table}}" WHERE scope = $1 AND id = $2`,
	Count: `SELECT COUNT(*) FROM "{{table}}"`,
	InsertFull: `INSERT INTO "{{table}}" (scope, id, state, fingerprint, token, result, retention_ns, created_ns, expires_ns)
		VALUES ($1, $2, $3, $4, $5, $6, $7 * 1000, $8 * 1000, $9 * 1000)`,
	// n probes of the primary key (scope, id).
	Applied: func(n int) string {
		return `SELECT id, state, created_ns FROM "{{table}}" WHERE scope = $1 AND id IN (` + recordsql.IDs(n, "") + ")"
	},
}
