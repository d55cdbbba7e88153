package idempg

import (
	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/internal/effectsql"
)

func (driver) Saga() *idemsql.SagaSQL { return &sagaStmts }

// sagaStmts are the statements the drivers share (effectsql.Saga) and
// PostgreSQL's own: a row lock, which the sweep skips, so that concurrent
// sweepers share the work.
var sagaStmts = func() idemsql.SagaSQL {
	s := effectsql.Saga("key")
	s.Insert = "INSERT INTO" + effectsql.SagaInsert + " ON CONFLICT (id) DO NOTHING"
	s.ReadForUpdate = effectsql.SagaRead + " FOR UPDATE"
	s.SweepIDs = effectsql.SagaSweepIDs + " FOR UPDATE SKIP LOCKED"
	// s.id = ANY reaches the rows by the primary key in any plan: see GroupLook
	// (sql_effect.go).
	s.GroupSave = `UPDATE idem_sagas AS s SET state = u.state, step = u.step, results = u.results, attempts = u.attempts,
	reason = u.reason, next_at = u.next_at, lease_until = u.lease_until, updated_at = u.now
FROM (SELECT * FROM unnest($1::text[], $2::bigint[], $3::text[], $4::bigint[], $5::text[], $6::bigint[], $7::bigint[],
	$8::bigint[], $9::text[], $10::bigint[]) AS x(state, step, results, attempts, reason, next_at, lease_until, now, id, token)
	ORDER BY x.id) AS u
WHERE s.id = ANY($9::text[]) AND s.id = u.id AND s.token = u.token
RETURNING s.id, s.token`
	return s
}()
