package idemsqlite

import (
	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/internal/inboxsql"
)

func (driver) Inbox() *idemsql.InboxSQL { return &inboxStmts }

// inboxStmts are the statements of a database that speaks ON CONFLICT and
// RETURNING (inboxsql.OnConflict). They lock no row: SQLite's writer transaction
// holds the whole database from BEGIN.
var inboxStmts = inboxsql.OnConflict("")
