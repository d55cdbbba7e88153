package idemmysql

import "github.com/idemhq/idem/idemsql"

func (driver) Seq() *idemsql.SeqSQL { return &seqStmts }

// MySQL has neither ON CONFLICT nor UPDATE … RETURNING. Ensure inserts a blank
// window or takes the existing row's exclusive lock, and Lock reads it under that
// lock: reading first (a locking read of a missing row takes a gap lock) deadlocks
// first checks of a new producer with each other. IGNORE skips only the duplicate:
// idemseq.CheckArgs bounds the producer by its column.
var seqStmts = idemsql.SeqSQL{
	Ensure: `INSERT INTO idem_sequences (scope, producer, epoch, next, bits) VALUES ($1, $2, 0, 0, NULL)
		ON DUPLICATE KEY UPDATE epoch = epoch`,
	Lock:   `SELECT epoch, next, bits FROM idem_sequences WHERE scope = $1 AND producer = $2 FOR UPDATE`,
	Insert: `INSERT IGNORE INTO idem_sequences (scope, producer, epoch, next, bits) VALUES ($1, $2, $3, $4, $5)`,
	Update: `UPDATE idem_sequences SET epoch = $3, next = $4, bits = $5 WHERE scope = $1 AND producer = $2`,
	// The upsert holds the row's lock until the end of the transaction, so
	// Registered sees this upsert's epoch.
	Register: `INSERT INTO idem_sequences (scope, producer, epoch, next, bits) VALUES ($1, $2, 1, 0, NULL)
		ON DUPLICATE KEY UPDATE epoch = epoch + 1`,
	Registered: `SELECT epoch, next FROM idem_sequences WHERE scope = $1 AND producer = $2`,
}
