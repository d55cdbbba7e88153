package idemsqlite

import (
	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/internal/effectsql"
)

func (driver) Saga() *idemsql.SagaSQL { return &sagaStmts }

// sagaStmts are the statements the drivers share (effectsql.Saga) and
// SQLite's own, which lock no row: its writer transaction holds the whole
// database.
var sagaStmts = func() idemsql.SagaSQL {
	s := effectsql.Saga("key")
	s.Insert = "INSERT INTO" + effectsql.SagaInsert + " ON CONFLICT (id) DO NOTHING"
	s.ReadForUpdate = effectsql.SagaRead
	s.SweepIDs = effectsql.SagaSweepIDs
	return s
}()
