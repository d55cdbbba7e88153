package idemsqlite

import (
	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/internal/outboxsql"
)

func (driver) Outbox() *idemsql.OutboxSQL { return &outboxStmts }

// outboxStmts are the common statements on SQLite's single writer: a transaction
// holds the whole database, so a round takes no partition and no row is locked.
var outboxStmts = func() idemsql.OutboxSQL {
	s := outboxsql.Common()
	s.SingleWriter = true
	s.Claim = outboxsql.Due + `
ORDER BY o.id LIMIT $2`
	s.LockParked = "SELECT id FROM idem_outbox WHERE id = $1 AND parked_at IS NOT NULL AND published_at IS NULL"
	s.LockPublished = "SELECT id FROM idem_outbox WHERE id = $1 AND published_at IS NOT NULL"
	return s
}()
