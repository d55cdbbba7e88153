package idempg

import "github.com/idemhq/idem/idemsql"

func (driver) Effect() *idemsql.EffectSQL { return &effectStmts }

var effectStmts = idemsql.EffectSQL{}
