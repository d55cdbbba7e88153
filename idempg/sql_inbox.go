package idempg

import "github.com/idemhq/idem/idemsql"

func (driver) Inbox() *idemsql.InboxSQL { return &inboxStmts }

var inboxStmts = idemsql.InboxSQL{}
