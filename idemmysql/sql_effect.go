package idemmysql

import (
	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/internal/effectsql"
)

func (driver) Effect() *idemsql.EffectSQL { return &effectStmts }

// effectStmts are the statements the drivers share (effectsql.Effect), with the
// column key quoted (MySQL reserves the word), and MySQL's own. Insert is INSERT
// IGNORE, which skips only the duplicate here: the key and the step fit their
// columns (the fence bounds them); the fence locks before it inserts
// (LockFirst). It has no arrays: GroupInsert and GroupFinish are empty.
var effectStmts = func() idemsql.EffectSQL {
	s := effectsql.Effect("`key`")
	s.Insert = "INSERT IGNORE INTO idem_effects (`key`, step, state, token, lease_until, attempts, created_at, updated_at) " +
		"VALUES ($1, $2, 'pending', 1, $3, 1, $4, $4)"
	s.Record = "INSERT IGNORE INTO idem_effects (`key`, step, state, token, lease_until, attempts, result, reason, created_at, updated_at) " +
		"VALUES ($1, $2, $3, 1, 0, 1, $4, $5, $6, $6)"
	s.LockFirst = true
	s.Lock = "SELECT state, token, lease_until, result, reason FROM idem_effects WHERE `key` = $1 AND step = $2 FOR UPDATE"
	// MySQL bounds a DELETE itself.
	sweep := func(where string) string { return "DELETE FROM idem_effects WHERE " + where + " LIMIT $2" }
	s.Sweep, s.SweepKeepingSagas = sweep(effectsql.EffectSweepWhere("`key`", false)), sweep(effectsql.EffectSweepWhere("`key`", true))
	return s
}()
