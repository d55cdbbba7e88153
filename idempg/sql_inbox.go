package idempg

import (
	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/internal/inboxsql"
)

func (driver) Inbox() *idemsql.InboxSQL { return &inboxStmts }

// inboxStmts are the statements of a database that speaks ON CONFLICT and
// RETURNING (inboxsql.OnConflict), locking the rows the operator's writes read.
var inboxStmts = inboxsql.OnConflict(" FOR UPDATE")
