package idempg

import (
	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/internal/effectsql"
)

func (driver) Effect() *idemsql.EffectSQL { return &effectStmts }

// effectStmts are the statements the drivers share (effectsql.Effect) and
// PostgreSQL's own: a row lock, and concurrent callers' inserts and finishes over
// arrays (unnest), one statement for many (package effect's group writes).
var effectStmts = func() idemsql.EffectSQL {
	s := effectsql.Effect("key")
	s.Insert = `INSERT INTO idem_effects (key, step, state, token, lease_until, attempts, created_at, updated_at)
		VALUES ($1, $2, 'pending', 1, $3, 1, $4, $4) ON CONFLICT (key, step) DO NOTHING`
	s.Record = `INSERT INTO idem_effects (key, step, state, token, lease_until, attempts, result, reason, created_at, updated_at)
		VALUES ($1, $2, $3, 1, 0, 1, $4, $5, $6, $6) ON CONFLICT (key, step) DO NOTHING`
	s.Lock = `SELECT state, token, lease_until, result, reason FROM idem_effects WHERE key = $1 AND step = $2 FOR UPDATE`
	s.GroupInsert = `INSERT INTO idem_effects (key, step, state, token, lease_until, attempts, created_at, updated_at)
SELECT k.key, k.step, 'pending', 1, k.lease, 1, k.now, k.now
FROM unnest($1::text[], $2::text[], $3::bigint[], $4::bigint[]) AS k(key, step, lease, now)
ORDER BY k.key, k.step
ON CONFLICT (key, step) DO NOTHING
RETURNING key, step`
	s.GroupRecord = `INSERT INTO idem_effects (key, step, state, token, lease_until, attempts, result, reason, created_at, updated_at)
SELECT k.key, k.step, k.state, 1, 0, 1, k.result, k.reason, k.now, k.now
FROM unnest($1::text[], $2::text[], $3::text[], $4::bytea[], $5::text[], $6::bigint[]) AS k(key, step, state, result, reason, now)
ORDER BY k.key, k.step
ON CONFLICT (key, step) DO NOTHING
RETURNING key, step`
	// The statements over arrays reach rows by their primary key in any plan:
	// GroupLook through a LATERAL subquery the planner keeps apart (LIMIT), and
	// GroupFinish with key = ANY. A plain join on unnest gets, in the generic plan
	// cached once a statement ran five times on a new table (about 10 pages to the
	// planner), a hash join over a sequential scan, which pgx then reuses while the
	// table grows: every batch read the whole table until autovacuum's next look.
	s.GroupLook = `SELECT e.key, e.step, e.state, e.result, e.reason
FROM unnest($1::text[], $2::text[]) AS k(key, step)
CROSS JOIN LATERAL (SELECT * FROM idem_effects AS e WHERE e.key = k.key AND e.step = k.step LIMIT 1) AS e`
	s.GroupFinish = `UPDATE idem_effects AS e SET state = u.state, result = u.result, reason = u.reason, updated_at = u.now
FROM (SELECT * FROM unnest($1::text[], $2::text[], $3::bigint[], $4::text[], $5::bytea[], $6::text[], $7::bigint[])
	AS x(key, step, token, state, result, reason, now) ORDER BY x.key, x.step) AS u
WHERE e.key = ANY($1::text[]) AND e.key = u.key AND e.step = u.step AND e.token = u.token AND e.state = 'pending'
RETURNING e.key, e.step, e.token`
	// SKIP LOCKED leaves alone the rows a Do holds locked right now, and lets
	// sweepers in several processes share the work.
	sweep := func(where string) string {
		return `DELETE FROM idem_effects WHERE ctid = ANY (ARRAY(SELECT ctid FROM idem_effects WHERE ` + where +
			` LIMIT $2 FOR UPDATE SKIP LOCKED))`
	}
	s.Sweep, s.SweepKeepingSagas = sweep(effectsql.EffectSweepWhere("key", false)), sweep(effectsql.EffectSweepWhere("key", true))
	return s
}()
