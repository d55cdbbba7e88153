package idemsqlite

import "github.com/idemhq/idem/idemsql"

func (driver) Saga() *idemsql.SagaSQL { return &sagaStmts }

var sagaStmts = idemsql.SagaSQL{}
