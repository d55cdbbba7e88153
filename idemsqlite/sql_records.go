package idemsqlite

import "github.com/idemhq/idem/idemsql"

func (driver) Records() *idemsql.RecordsSQL { return &recordsStmts }

var recordsStmts = idemsql.RecordsSQL{}
