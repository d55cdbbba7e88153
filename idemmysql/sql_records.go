package idemmysql

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
const recordColumns = `state, fingerprint, token, result, created_us, expires_us`

// recordsStmts is MySQL's records family. The claim path's statements are the
// store's own (records.go). Scopes and ids are VARBINARY: they sort in ascending
// byte order. A released key keeps its row, in progress with a lease that ended at
// the epoch (see the release statement), until the sweeper deletes it; Inspect and
// List show it so.
var recordsStmts = idemsql.RecordsSQL{
	TimeUnit: time.Microsecond,
	Inspect:  "SELECT " + recordColumns + " FROM `{{table}}` WHERE scope = $1 AND id = $2",
	List:     "SELECT id, " + recordColumns + " FROM `{{table}}` WHERE scope = $1 AND id > $2 ORDER BY id LIMIT $3",
	// DISTINCT on the primary key's first column, which InnoDB answers with a loose
	// index scan ("Using index for group-by"): one seek of the key per scope (see
	// TestScopesPlanUsesLooseIndexScan).
	Scopes: "SELECT DISTINCT scope FROM `{{table}}` WHERE scope > $1 ORDER BY scope LIMIT $2",
	// MySQL's DELETE returns no rows: the record is read under its lock, so a
	// concurrent Complete lands either before (the completed record is evicted) or
	// after (no row: the holder gets ErrLeaseLost), then deleted. Tokens come from
	// the sequence or the AUTO_INCREMENT table, never from the row, so the key's
	// next claim gets a token above the evicted holder's.
	EvictLocked: true,
	Lock:        "SELECT " + recordColumns + " FROM `{{table}}` WHERE scope = $1 AND id = $2 FOR UPDATE",
	Delete:      "DELETE FROM `{{table}}` WHERE scope = $1 AND id = $2",
	// The token rows the sweep leaves behind are the store's (Store.Sweep).
	Sweep: "DELETE FROM `{{table}}` WHERE expires_us <= " + nowUS + " ORDER BY expires_us LIMIT $1",
	// InnoDB's row estimate of the table.
	Count: "SELECT TABLE_ROWS FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name = '{{table}}'",
	InsertFull: "INSERT INTO `{{table}}` (scope, id, state, fingerprint, token, result, retention_us, created_us, expires_us)" +
		" VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
	// n probes of the primary key (scope, id).
	Applied: func(n int) string {
		return "SELECT id, state, created_us FROM `{{table}}` WHERE scope = $1 AND id IN (" + recordsql.IDs(n, "") + ")"
	},
}
