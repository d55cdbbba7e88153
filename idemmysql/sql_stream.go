package idemmysql

import "github.com/idemhq/idem/idemsql"

func (driver) Stream() *idemsql.StreamSQL { return &streamStmts }

var streamStmts = idemsql.StreamSQL{
	// The key columns are VARBINARY(255): Ack refuses what strict mode would refuse
	// less clearly, and what another mode would truncate into another key.
	MaxKey: 255,

	// The unique key holds a hash of ikey (see migrate/sql/mysql/stream).
	EventByKey: `SELECT seq, type, entity, data, at FROM idem_stream_events
		WHERE channel = $1 AND ikey_hash = UNHEX(SHA2($2, 256)) AND ikey = $2`,
	// Neither ON CONFLICT nor RETURNING: LAST_INSERT_ID(expr) keeps the new head for
	// this connection, where NextHeadRead, in the same transaction, reads it back.
	// The row stays locked until the transaction ends.
	NextHead: `INSERT INTO idem_stream_heads (channel, head) VALUES ($1, LAST_INSERT_ID(1))
		ON DUPLICATE KEY UPDATE head = LAST_INSERT_ID(head + 1)`,
	NextHeadRead: `SELECT LAST_INSERT_ID()`,
	InsertEvent:  `INSERT INTO idem_stream_events (channel, seq, type, entity, data, ikey, at) VALUES ($1, $2, $3, $4, $5, $6, $7)`,
	ReadEvents:   `SELECT seq, type, entity, data, at FROM idem_stream_events WHERE channel = $1 AND seq > $2 ORDER BY seq LIMIT $3`,
	Head:         `SELECT head FROM idem_stream_heads WHERE channel = $1`,
	Ack: `INSERT INTO idem_stream_clients (channel, client, seq, seen) VALUES ($1, $2, $3, $4)
		ON DUPLICATE KEY UPDATE seen = VALUES(seen), seq = GREATEST(seq, VALUES(seq))`,

	ForgetIdleClients: `DELETE FROM idem_stream_clients WHERE seen < $1`,
	ForgetExtraClients: `DELETE FROM idem_stream_clients WHERE (channel, client) IN (SELECT channel, client FROM
		(SELECT channel, client, ROW_NUMBER() OVER (PARTITION BY channel ORDER BY seen DESC, client) AS n
		FROM idem_stream_clients) ranked WHERE n > $1)`,
	TrimOld: `DELETE FROM idem_stream_events WHERE at < $1`,
	TrimAcked: `DELETE FROM idem_stream_events WHERE seq <= (SELECT MIN(c.seq) FROM idem_stream_clients c
		WHERE c.channel = idem_stream_events.channel)`,
}
