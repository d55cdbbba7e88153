package idempg

import "github.com/idemhq/idem/idemsql"

func (driver) Outbox() *idemsql.OutboxSQL { return &outboxStmts }

var outboxStmts = idemsql.OutboxSQL{}
