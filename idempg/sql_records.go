package idempg

import (
	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/idemsql/sqlstore"
	"github.com/idemhq/idem/internal/recordsql"
)

func (driver) Records() *idemsql.RecordsSQL { return &recordsStmts }

// sharedRecords is what the store embeds to be sqlstore's Inspector and
// ScopeLister; the alias keeps the embedded field unexported.
type sharedRecords = sqlstore.Records

// recordColumns are the record columns of idemsql.RecordsSQL.
const recordColumns = `state, fingerprint, token, result, created_at, expires_at`

// recordsStmts is PostgreSQL's records family. The claim path's statements are the
// store's own (queries.go, record.go).
var recordsStmts = idemsql.RecordsSQL{
	Inspect: `SELECT ` + recordColumns + ` FROM "{{table}}" WHERE scope = $1::text AND id = $2::text`,
	// With scope fixed by equality, the primary key (scope, id) yields ids in order,
	// so a page is one index range scan of limit+1 rows (see
	// TestListPlanUsesPrimaryKey) in the column's collation.
	List: `SELECT id, ` + recordColumns + ` FROM "{{table}}"
		WHERE scope = $1::text AND id > $2::text ORDER BY id LIMIT $3::int`,
	// PostgreSQL has no skip scan of its own: each step of the recursion is one
	// descent of the index to the first scope above the last one, and the outer
	// LIMIT stops the recursion, which PostgreSQL evaluates lazily. Scopes come in
	// the scope column's collation. See TestScopesPlanUsesPrimaryKey.
	Scopes: `WITH RECURSIVE walk(scope) AS (
	(SELECT r.scope FROM "{{table}}" r WHERE r.scope > $1::text ORDER BY r.scope LIMIT 1)
	UNION ALL
	SELECT (SELECT r.scope FROM "{{table}}" r WHERE r.scope > walk.scope ORDER BY r.scope LIMIT 1)
	FROM walk WHERE walk.scope IS NOT NULL
)
SELECT scope FROM walk WHERE scope IS NOT NULL LIMIT $2::int`,
	// A concurrent completeSQL either committed first (the DELETE, having waited
	// for its row lock, re-checks the new row version and evicts the completed
	// record) or waits for the DELETE and then finds no row: ErrLeaseLost. Tokens
	// come from the table's sequence, so the key's next claim gets a token above
	// the evicted holder's.
	Evict: `DELETE FROM "{{table}}" WHERE scope = $1::text AND id = $2::text AND (state = 2 OR $3::bool)
		RETURNING ` + recordColumns,
	State: `SELECT state FROM "{{table}}" WHERE scope = $1::text AND id = $2::text`,
	// The clock is read in an InitPlan so the expires_at index can serve the range
	// (a volatile call in the WHERE could not); SKIP LOCKED leaves rows alone that
	// a transaction is taking over right now.
	Sweep: `DELETE FROM "{{table}}"
WHERE ctid = ANY (ARRAY(
	SELECT ctid FROM "{{table}}"
	WHERE expires_at <= (SELECT clock_timestamp())
	LIMIT $1::int
	FOR UPDATE SKIP LOCKED))`,
	// The planner's row estimate: free to read at every scrape, unlike count(*),
	// and as fresh as the last (auto)vacuum or analyze.
	Count: `SELECT GREATEST(reltuples, 0)::float8 FROM pg_class WHERE oid = to_regclass('"{{table}}"')`,
	InsertFull: `INSERT INTO "{{table}}" (scope, id, state, fingerprint, token, result, retention, created_at, expires_at)
		VALUES ($1::text, $2::text, $3::smallint, $4::bytea, $5::bigint, $6::bytea, $7::bigint * interval '1 microsecond',
			timestamptz 'epoch' + $8::bigint * interval '1 microsecond', timestamptz 'epoch' + $9::bigint * interval '1 microsecond')`,
	// n probes of the primary key (scope, id).
	Applied: func(n int) string {
		return `SELECT id, state, created_at FROM "{{table}}" WHERE scope = $1::text AND id IN (` + recordsql.IDs(n, "::text") + ")"
	},
}
