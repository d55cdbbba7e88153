package idempg

import (
	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/internal/effectsql"
)

func (driver) Effect() *idemsql.EffectSQL { return &effectStmts }

// effectSweep deletes up to $2 effects that match where, in PostgreSQL's form of a
// bounded DELETE: SKIP LOCKED leaves alone the rows a Do holds locked right now,
// and lets sweepers in several processes share the work.
func effectSweep(where string) string {
	return `DELETE FROM idem_effects WHERE ctid = ANY (ARRAY(SELECT ctid FROM idem_effects WHERE ` + where +
		` LIMIT $2 FOR UPDATE SKIP LOCKED))`
}

var effectStmts = idemsql.EffectSQL{
	Insert: `INSERT INTO idem_effects (key, step, state, token, lease_until, attempts, created_at, updated_at)
		VALUES ($1, $2, 'pending', 1, $3, 1, $4, $4) ON CONFLICT (key, step) DO NOTHING`,
	Lock: `SELECT state, token, lease_until, result, reason FROM idem_effects WHERE key = $1 AND step = $2 FOR UPDATE`,
	Takeover: `UPDATE idem_effects SET token = $1, lease_until = $2, attempts = attempts + 1, updated_at = $3
		WHERE key = $4 AND step = $5`,
	Renew: `UPDATE idem_effects SET lease_until = $1, updated_at = $2
		WHERE key = $3 AND step = $4 AND token = $5 AND state = 'pending'`,
	Finish: `UPDATE idem_effects SET state = $1, result = $2, reason = $3, updated_at = $4
		WHERE key = $5 AND step = $6 AND token = $7 AND state = 'pending'`,
	Release: `UPDATE idem_effects SET lease_until = 0, updated_at = $1
		WHERE key = $2 AND step = $3 AND token = $4 AND state = 'pending'`,
	PushBack: `UPDATE idem_effects SET lease_until = $1
		WHERE key = $2 AND step = $3 AND state = 'pending' AND lease_until <= $1`,
	Due: `SELECT key FROM idem_effects WHERE step = $1 AND state = 'pending' AND lease_until <= $2
		ORDER BY lease_until LIMIT $3`,
	Get: `SELECT key, step, state, token, attempts, reason, lease_until, created_at, updated_at, result
		FROM idem_effects WHERE key = $1 AND step = $2`,
	GroupInsert: `INSERT INTO idem_effects (key, step, state, token, lease_until, attempts, created_at, updated_at)
SELECT k.key, k.step, 'pending', 1, k.lease, 1, k.now, k.now
FROM unnest($1::text[], $2::text[], $3::bigint[], $4::bigint[]) AS k(key, step, lease, now)
ORDER BY k.key, k.step
ON CONFLICT (key, step) DO NOTHING
RETURNING key, step`,
	GroupFinish: `UPDATE idem_effects AS e SET state = u.state, result = u.result, reason = u.reason, updated_at = u.now
FROM (SELECT * FROM unnest($1::text[], $2::text[], $3::bigint[], $4::text[], $5::bytea[], $6::text[], $7::bigint[])
	AS x(key, step, token, state, result, reason, now) ORDER BY x.key, x.step) AS u
WHERE e.key = u.key AND e.step = u.step AND e.token = u.token AND e.state = 'pending'
RETURNING e.key, e.step, e.token`,
	List:              effectsql.EffectList("key"),
	Sweep:             effectSweep(effectsql.EffectSweepWhere("key", false)),
	SweepKeepingSagas: effectSweep(effectsql.EffectSweepWhere("key", true)),
}
