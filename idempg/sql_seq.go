package idempg

import "github.com/idemhq/idem/idemsql"

func (driver) Seq() *idemsql.SeqSQL { return &seqStmts }

// The lock is a plain locking read: a check of a known producer writes nothing when
// its window does not change (a duplicate), so it leaves no dead row behind.
var seqStmts = idemsql.SeqSQL{
	Lock: `SELECT epoch, next, bits FROM idem_sequences WHERE scope = $1 AND producer = $2 FOR UPDATE`,
	Insert: `INSERT INTO idem_sequences (scope, producer, epoch, next, bits) VALUES ($1, $2, $3, $4, $5)
		ON CONFLICT (scope, producer) DO NOTHING`,
	Update: `UPDATE idem_sequences SET epoch = $3, next = $4, bits = $5 WHERE scope = $1 AND producer = $2`,
	Register: `INSERT INTO idem_sequences (scope, producer, epoch, next, bits) VALUES ($1, $2, 1, 0, NULL)
		ON CONFLICT (scope, producer) DO UPDATE SET epoch = idem_sequences.epoch + 1
		RETURNING epoch, next`,
}
