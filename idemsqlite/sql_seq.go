package idemsqlite

import "github.com/idemhq/idem/idemsql"

func (driver) Seq() *idemsql.SeqSQL { return &seqStmts }

// SQLite has no row locks and one writer: the lock is an upsert, whose write takes
// the database's write lock, and which returns the row, new or not, in one statement.
var seqStmts = idemsql.SeqSQL{
	Lock: `INSERT INTO idem_sequences (scope, producer, epoch, next, bits) VALUES ($1, $2, 0, 0, NULL)
		ON CONFLICT (scope, producer) DO UPDATE SET epoch = idem_sequences.epoch
		RETURNING epoch, next, bits`,
	Insert: `INSERT INTO idem_sequences (scope, producer, epoch, next, bits) VALUES ($1, $2, $3, $4, $5)
		ON CONFLICT (scope, producer) DO NOTHING`,
	Update: `UPDATE idem_sequences SET epoch = $3, next = $4, bits = $5 WHERE scope = $1 AND producer = $2`,
	Register: `INSERT INTO idem_sequences (scope, producer, epoch, next, bits) VALUES ($1, $2, 1, 0, NULL)
		ON CONFLICT (scope, producer) DO UPDATE SET epoch = idem_sequences.epoch + 1
		RETURNING epoch, next`,
}
