package idemmysql

import "github.com/idemhq/idem/idemsql"

func (driver) Seq() *idemsql.SeqSQL { return &seqStmts }

var seqStmts = idemsql.SeqSQL{}
