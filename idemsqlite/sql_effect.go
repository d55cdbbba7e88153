package idemsqlite

import (
	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/internal/effectsql"
)

func (driver) Effect() *idemsql.EffectSQL { return &effectStmts }

// effectStmts are the statements the drivers share (effectsql.Effect) and
// SQLite's own. They lock no row: SQLite's writer transaction holds the whole
// database. It has no arrays: GroupInsert and GroupFinish are empty, and each
// caller writes alone.
var effectStmts = func() idemsql.EffectSQL {
	s := effectsql.Effect("key")
	s.Insert = `INSERT INTO idem_effects (key, step, state, token, lease_until, attempts, created_at, updated_at)
		VALUES ($1, $2, 'pending', 1, $3, 1, $4, $4) ON CONFLICT (key, step) DO NOTHING`
	s.Record = `INSERT INTO idem_effects (key, step, state, token, lease_until, attempts, result, reason, created_at, updated_at)
		VALUES ($1, $2, $3, 1, 0, 1, $4, $5, $6, $6) ON CONFLICT (key, step) DO NOTHING`
	s.Lock = `SELECT state, token, lease_until, result, reason FROM idem_effects WHERE key = $1 AND step = $2`
	// A DELETE bounded by rowid.
	sweep := func(where string) string {
		return `DELETE FROM idem_effects WHERE rowid IN (SELECT rowid FROM idem_effects WHERE ` + where + ` LIMIT $2)`
	}
	s.Sweep, s.SweepKeepingSagas = sweep(effectsql.EffectSweepWhere("key", false)), sweep(effectsql.EffectSweepWhere("key", true))
	return s
}()
