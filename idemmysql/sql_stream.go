package idemmysql

import (
	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/internal/streamsql"
)

func (driver) Stream() *idemsql.StreamSQL { return &streamStmts }

// streamStmts are the statements the drivers share (streamsql.Stream) and
// MySQL's own.
var streamStmts = func() idemsql.StreamSQL {
	s := streamsql.Stream()
	// The key columns are VARBINARY(255): Ack refuses what strict mode would refuse
	// less clearly, and what another mode would truncate into another key.
	s.MaxKey = 255
	// The unique key holds a hash of ikey (see migrate/sql/mysql/stream).
	s.EventByKey = `SELECT seq, type, entity, data, at FROM idem_stream_events
		WHERE channel = $1 AND ikey_hash = UNHEX(SHA2($2, 256)) AND ikey = $2`
	// Neither ON CONFLICT nor RETURNING: LAST_INSERT_ID(expr) keeps the new head for
	// this connection, where NextHeadRead, in the same transaction, reads it back.
	// The row stays locked until the transaction ends.
	s.NextHead = `INSERT INTO idem_stream_heads (channel, head) VALUES ($1, LAST_INSERT_ID(1))
		ON DUPLICATE KEY UPDATE head = LAST_INSERT_ID(head + 1)`
	s.NextHeadRead = `SELECT LAST_INSERT_ID()`
	s.Ack = `INSERT INTO idem_stream_clients (channel, client, seq, seen) VALUES ($1, $2, $3, $4)
		ON DUPLICATE KEY UPDATE seen = VALUES(seen), seq = GREATEST(seq, VALUES(seq))`
	return s
}()
