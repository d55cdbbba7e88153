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
	return s
}()
