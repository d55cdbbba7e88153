// Package effectsql holds the statements of idemsql's effect and saga families
// whose text the drivers of this module (idempg, idemsqlite, idemmysql) share:
// Effect and Saga return them, and each driver's sql_effect.go and sql_saga.go
// add the statements of its own (a lock clause, INSERT IGNORE, a bounded DELETE,
// Postgres's statements over arrays). The shared text differs only in how the
// key column of idem_effects is named, which each driver passes (MySQL reserves
// the word and quotes it in backquotes). Functions build the statements whose
// text depends on the call (a filter, an IN list).
package effectsql

import (
	"fmt"
	"strings"

	"github.com/idemhq/idem/idemsql"
)

// Placeholders returns "$from, $from+1, …" for n arguments.
func Placeholders(from, n int) string {
	var b strings.Builder
	for i := range n {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "$%d", from+i)
	}
	return b.String()
}

// args numbers a statement's placeholders in the order its conditions are added.
type args struct{ n int }

func (a *args) next() string { a.n++; return fmt.Sprintf("$%d", a.n) }

// EffectList returns idemsql.EffectSQL.List for key, the key column as the
// database names it. Each page is an index range scan: by primary key, or for a
// state by the index of open effects.
func EffectList(key string) func(state, pastLease, byKey, after bool) string {
	return func(state, pastLease, byKey, after bool) string {
		var a args
		var where []string
		if state {
			// The literal second term matches the partial index's predicate, which
			// lets SQLite (and PostgreSQL's generic plans) use it.
			where = append(where, "state = "+a.next()+" AND state <> 'complete'")
		}
		if pastLease {
			where = append(where, "lease_until <= "+a.next())
		}
		if byKey {
			where = append(where, key+" = "+a.next())
		}
		if after {
			// Not a row comparison: this form starts an index range on every dialect.
			k, s := a.next(), a.next()
			where = append(where, fmt.Sprintf("%s >= %s AND (%s > %s OR step > %s)", key, k, key, k, s))
		}
		q := "SELECT " + key + ", step, state, token, attempts, reason, lease_until, created_at, updated_at FROM idem_effects"
		if len(where) > 0 {
			q += " WHERE " + strings.Join(where, " AND ")
		}
		return q + " ORDER BY " + key + ", step LIMIT " + a.next()
	}
}

// sagaNames is the condition on the names an orchestrator has, from placeholder
// $from: none matches no saga.
func sagaNames(from, n int) string {
	if n == 0 {
		return "1 = 0"
	}
	return "saga IN (" + Placeholders(from, n) + ")"
}

// SagaPoll is idemsql.SagaSQL.Poll.
func SagaPoll(names, limit int) string {
	return `SELECT id FROM idem_sagas WHERE state IN ('running', 'compensating')
			AND next_at <= $1 AND lease_until <= $1 AND ` + sagaNames(2, names) + fmt.Sprintf(` ORDER BY next_at LIMIT %d`, limit)
}

// SagaLease is idemsql.SagaSQL.Lease.
func SagaLease(names int) string {
	return `UPDATE idem_sagas SET lease_until = $1, token = token + 1
			WHERE id = $2 AND state IN ('running', 'compensating') AND lease_until <= $3 AND next_at <= $3 AND ` + sagaNames(4, names)
}

// SagaParked selects the parked sagas, with the parked mark as placeholder p.
// PostgreSQL and SQLite read them from the partial index of due sagas, MySQL from
// (state, next_at).
func SagaParked(p string) string {
	return `state IN ('running', 'compensating') AND next_at = ` + p
}

// SagaList is idemsql.SagaSQL.List. Each page is an index range scan: the
// primary key, or (state, id); the parked ones are read from the index of due
// sagas.
func SagaList(state, parked, after bool) string {
	var a args
	var where []string
	switch {
	case parked:
		where = append(where, SagaParked(a.next()))
	case state:
		where = append(where, "state = "+a.next())
	}
	if after {
		where = append(where, "id > "+a.next())
	}
	q := `SELECT id, saga, state, step, attempts, reason, created_at, updated_at, next_at FROM idem_sagas`
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	return q + " ORDER BY id LIMIT " + a.next()
}

// SagaSweepEffects returns idemsql.SagaSQL.SweepEffects for key, the key column
// as the database names it.
func SagaSweepEffects(key string) func(n int) string {
	return func(n int) string {
		return `DELETE FROM idem_effects WHERE ` + key + ` IN (` + Placeholders(1, n) + `) AND (step LIKE 'do:%' OR step LIKE 'undo:%')`
	}
}

// SagaSweepResolutions is idemsql.SagaSQL.SweepResolutions.
func SagaSweepResolutions(n int) string {
	return `DELETE FROM idem_saga_resolutions WHERE id IN (` + Placeholders(1, n) + `)`
}

// SagaSweepSagas is idemsql.SagaSQL.SweepSagas.
func SagaSweepSagas(n int) string {
	return `DELETE FROM idem_sagas WHERE id IN (` + Placeholders(1, n) + `)`
}

// EffectSweepWhere is the condition of the effects the sweep deletes: complete,
// last changed before $1 (served by the index of migration 003_sweep_index). With
// sagas, it keeps the effects of a saga that is running, compensating or failed
// (an operator's to retry or resolve), key being the key column as the database
// names it.
func EffectSweepWhere(key string, sagas bool) string {
	where := "state = 'complete' AND updated_at < $1"
	if sagas {
		where += " AND NOT EXISTS (SELECT 1 FROM idem_sagas s WHERE s.id = idem_effects." + key +
			" AND s.state IN ('running', 'compensating', 'failed'))"
	}
	return where
}

// Effect returns the statements of idemsql.EffectSQL whose text the drivers of
// this module share, with key the key column as the database names it. The driver
// sets the others: Insert, Record, Lock, LockFirst, GroupInsert, GroupFinish,
// GroupRecord, GroupLook, Sweep and SweepKeepingSagas.
func Effect(key string) idemsql.EffectSQL {
	r := strings.NewReplacer("{{key}}", key)
	return idemsql.EffectSQL{
		Takeover: r.Replace(`UPDATE idem_effects SET token = $1, lease_until = $2, attempts = attempts + 1, updated_at = $3
			WHERE {{key}} = $4 AND step = $5`),
		Renew: r.Replace(`UPDATE idem_effects SET lease_until = $1, updated_at = $2
			WHERE {{key}} = $3 AND step = $4 AND token = $5 AND state = 'pending'`),
		Finish: r.Replace(`UPDATE idem_effects SET state = $1, result = $2, reason = $3, updated_at = $4
			WHERE {{key}} = $5 AND step = $6 AND token = $7 AND state = 'pending'`),
		Release: r.Replace(`UPDATE idem_effects SET lease_until = 0, updated_at = $1
			WHERE {{key}} = $2 AND step = $3 AND token = $4 AND state = 'pending'`),
		PushBack: r.Replace(`UPDATE idem_effects SET lease_until = $1
			WHERE {{key}} = $2 AND step = $3 AND state = 'pending' AND lease_until <= $1`),
		Due: r.Replace(`SELECT {{key}} FROM idem_effects WHERE step = $1 AND state = 'pending' AND lease_until <= $2
			ORDER BY lease_until LIMIT $3`),
		Get: r.Replace(`SELECT {{key}}, step, state, token, attempts, reason, lease_until, created_at, updated_at, result
			FROM idem_effects WHERE {{key}} = $1 AND step = $2`),
		List: EffectList(key),
	}
}

// Saga returns the statements of idemsql.SagaSQL whose text the drivers of this
// module share, with key the key column of idem_effects as the database names it.
// The driver sets the others: Insert, ReadForUpdate (SagaRead with its lock
// clause) and SweepIDs (SagaSweepIDs with its lock clause).
func Saga(key string) idemsql.SagaSQL {
	return idemsql.SagaSQL{
		Poll:  SagaPoll,
		Lease: SagaLease,
		Read:  SagaRead,
		Save: `UPDATE idem_sagas SET state = $1, step = $2, results = $3, attempts = $4,
			reason = $5, next_at = $6, lease_until = $7, updated_at = $8 WHERE id = $9 AND token = $10`,
		Park: `UPDATE idem_sagas SET next_at = $1, lease_until = 0, reason = $2, updated_at = $3
			WHERE id = $4 AND token = $5`,
		IDs:              `SELECT id FROM idem_sagas WHERE $1 = '' OR state = $1 ORDER BY created_at, id LIMIT $2`,
		ParkedIDs:        `SELECT id FROM idem_sagas WHERE ` + SagaParked("$1") + ` ORDER BY created_at, id LIMIT $2`,
		List:             SagaList,
		ReadResolution:   `SELECT note, resolved_at, previous_state FROM idem_saga_resolutions WHERE id = $1`,
		InsertResolution: `INSERT INTO idem_saga_resolutions (id, previous_state, note, resolved_at) VALUES ($1, $2, $3, $4)`,
		Retry: `UPDATE idem_sagas SET state = $1, attempts = 0, next_at = $2, reason = $3, lease_until = 0, token = token + 1,
			updated_at = $4 WHERE id = $5 AND state = $6 AND token = $7`,
		Resolve: `UPDATE idem_sagas SET state = $1, lease_until = 0, token = token + 1, updated_at = $2
			WHERE id = $3 AND state = $4 AND token = $5`,
		RetryUndo: `UPDATE idem_effects SET state = 'pending', token = token + 1, lease_until = 0, reason = '',
			updated_at = $1 WHERE ` + key + ` = $2 AND state = 'failed' AND step LIKE 'undo:%'`,
		SweepEffects:     SagaSweepEffects(key),
		SweepResolutions: SagaSweepResolutions,
		SweepSagas:       SagaSweepSagas,
	}
}

// SagaRead is idemsql.SagaSQL.Read, and ReadForUpdate without its lock clause.
const SagaRead = `SELECT saga, state, step, data, results, attempts, reason, token, next_at, lease_until,
		created_at, updated_at FROM idem_sagas WHERE id = $1`

// SagaInsert is idemsql.SagaSQL.Insert without its verb ("INSERT INTO", "INSERT
// IGNORE INTO") and its conflict clause.
const SagaInsert = ` idem_sagas (id, saga, state, step, data, results, attempts, reason, next_at, lease_until, token,
		created_at, updated_at) VALUES ($1, $2, 'running', 0, $3, '{}', 0, '', $4, $5, $6, $4, $4)`

// SagaSweepIDs is idemsql.SagaSQL.SweepIDs without its lock clause.
const SagaSweepIDs = `SELECT id FROM idem_sagas WHERE state IN ('completed', 'compensated', 'resolved')
		AND updated_at < $1 LIMIT $2`
