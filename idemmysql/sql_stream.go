package idemmysql

import "github.com/idemhq/idem/idemsql"

func (driver) Stream() *idemsql.StreamSQL { return &streamStmts }

var streamStmts = idemsql.StreamSQL{}
