package idemmysql

import (
	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/internal/effectsql"
)

func (driver) Saga() *idemsql.SagaSQL { return &sagaStmts }

// sagaStmts are the statements the drivers share (effectsql.Saga), with the
// column key of idem_effects quoted (MySQL reserves the word), and MySQL's own:
// a row lock, and INSERT IGNORE, which skips only the duplicate here (the id fits
// its column: the orchestrator bounds it).
var sagaStmts = func() idemsql.SagaSQL {
	s := effectsql.Saga("`key`")
	s.Insert = "INSERT IGNORE INTO" + effectsql.SagaInsert
	s.ReadForUpdate = effectsql.SagaRead + " FOR UPDATE"
	s.SweepIDs = effectsql.SagaSweepIDs + " FOR UPDATE"
	return s
}()
