package idemmysql

import (
	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/internal/effectsql"
)

func (driver) Saga() *idemsql.SagaSQL { return &sagaStmts }

// sagaStmts lock the rows they change (FOR UPDATE) and quote the column key of
// idem_effects, a word MySQL reserves. Insert is INSERT IGNORE, which skips only
// the duplicate here: the id fits its column (the orchestrator bounds it).
var sagaStmts = idemsql.SagaSQL{
	Insert: `INSERT IGNORE INTO idem_sagas (id, saga, state, step, data, results, attempts, reason,
		next_at, lease_until, token, created_at, updated_at) VALUES ($1, $2, 'running', 0, $3, '{}', 0, '', $4, $5, $6, $4, $4)`,
	Poll:  effectsql.SagaPoll,
	Lease: effectsql.SagaLease,
	Read: `SELECT saga, state, step, data, results, attempts, reason, token, next_at, lease_until,
		created_at, updated_at FROM idem_sagas WHERE id = $1`,
	ReadForUpdate: `SELECT saga, state, step, data, results, attempts, reason, token, next_at, lease_until,
		created_at, updated_at FROM idem_sagas WHERE id = $1 FOR UPDATE`,
	Save: `UPDATE idem_sagas SET state = $1, step = $2, results = $3, attempts = $4,
		reason = $5, next_at = $6, lease_until = $7, updated_at = $8 WHERE id = $9 AND token = $10`,
	Park: `UPDATE idem_sagas SET next_at = $1, lease_until = 0, reason = $2, updated_at = $3
		WHERE id = $4 AND token = $5`,
	IDs:              `SELECT id FROM idem_sagas WHERE $1 = '' OR state = $1 ORDER BY created_at, id LIMIT $2`,
	ParkedIDs:        `SELECT id FROM idem_sagas WHERE ` + effectsql.SagaParked("$1") + ` ORDER BY created_at, id LIMIT $2`,
	List:             effectsql.SagaList,
	ReadResolution:   `SELECT note, resolved_at, previous_state FROM idem_saga_resolutions WHERE id = $1`,
	InsertResolution: `INSERT INTO idem_saga_resolutions (id, previous_state, note, resolved_at) VALUES ($1, $2, $3, $4)`,
	Retry: `UPDATE idem_sagas SET state = $1, attempts = 0, next_at = $2, reason = $3, lease_until = 0, token = token + 1,
		updated_at = $4 WHERE id = $5 AND state = $6 AND token = $7`,
	Resolve: `UPDATE idem_sagas SET state = $1, lease_until = 0, token = token + 1, updated_at = $2
		WHERE id = $3 AND state = $4 AND token = $5`,
	RetryUndo: `UPDATE idem_effects SET state = 'pending', token = token + 1, lease_until = 0, reason = '',
		updated_at = $1 WHERE ` + "`key`" + ` = $2 AND state = 'failed' AND step LIKE 'undo:%'`,
	SweepIDs: `SELECT id FROM idem_sagas WHERE state IN ('completed', 'compensated', 'resolved')
		AND updated_at < $1 LIMIT $2 FOR UPDATE`,
	SweepEffects:     effectsql.SagaSweepEffects("`key`"),
	SweepResolutions: effectsql.SagaSweepResolutions,
	SweepSagas:       effectsql.SagaSweepSagas,
}
