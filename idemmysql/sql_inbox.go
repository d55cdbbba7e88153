package idemmysql

import (
	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/internal/inboxsql"
)

func (driver) Inbox() *idemsql.InboxSQL { return &inboxStmts }

// inboxStmts are the statements the drivers share (inboxsql.Inbox), with MySQL's
// upsert clause, and MySQL's own.
var inboxStmts = func() idemsql.InboxSQL {
	s := inboxsql.Inbox(" FOR UPDATE", func(cols ...string) string {
		return " ON DUPLICATE KEY UPDATE " + inboxsql.Assign(cols, "VALUES(%s)")
	})
	// Not INSERT IGNORE, which would also turn a value too long for its column into
	// a warning: the duplicate alone is skipped.
	s.InsertDeadLetter = inboxsql.InsertDeadLetter + ` ON DUPLICATE KEY UPDATE id = id`
	// No RETURNING: lock the row, then compare and update (LSNAdvance left empty).
	s.LSNEnsure = `INSERT INTO idem_sequences (scope, producer, epoch, next, bits) VALUES ($1, $2, 0, 0, NULL)
		ON DUPLICATE KEY UPDATE epoch = epoch`
	s.LSNLock = `SELECT epoch, next FROM idem_sequences WHERE scope = $1 AND producer = $2 FOR UPDATE`
	s.LSNSet = `UPDATE idem_sequences SET epoch = $3, next = $4 WHERE scope = $1 AND producer = $2`
	return s
}()
