package idempg

import "github.com/idemhq/idem/idemsql"

func (driver) Stream() *idemsql.StreamSQL { return &streamStmts }

var streamStmts = idemsql.StreamSQL{
	// ikey <> '' is the partial unique index's own condition: without it in the
	// query, a generic plan cannot prove the index covers the row and reads the
	// whole channel instead, an append growing with its channel.
	EventByKey: `SELECT seq, type, entity, data, at FROM idem_stream_events WHERE channel = $1 AND ikey = $2 AND ikey <> ''`,
	NextHead: `INSERT INTO idem_stream_heads (channel, head) VALUES ($1, 1)
		ON CONFLICT (channel) DO UPDATE SET head = idem_stream_heads.head + 1 RETURNING head`,
	InsertEvent: `INSERT INTO idem_stream_events (channel, seq, type, entity, data, ikey, at) VALUES ($1, $2, $3, $4, $5, $6, $7)`,
	ReadEvents:  `SELECT seq, type, entity, data, at FROM idem_stream_events WHERE channel = $1 AND seq > $2 ORDER BY seq LIMIT $3`,
	Head:        `SELECT head FROM idem_stream_heads WHERE channel = $1`,
	Ack: `INSERT INTO idem_stream_clients (channel, client, seq, seen) VALUES ($1, $2, $3, $4)
		ON CONFLICT (channel, client) DO UPDATE SET seen = excluded.seen,
		seq = CASE WHEN excluded.seq > idem_stream_clients.seq THEN excluded.seq ELSE idem_stream_clients.seq END`,

	ForgetIdleClients: `DELETE FROM idem_stream_clients WHERE seen < $1`,
	ForgetExtraClients: `DELETE FROM idem_stream_clients WHERE (channel, client) IN (SELECT channel, client FROM
		(SELECT channel, client, ROW_NUMBER() OVER (PARTITION BY channel ORDER BY seen DESC, client) AS n
		FROM idem_stream_clients) ranked WHERE n > $1)`,
	TrimOld: `DELETE FROM idem_stream_events WHERE at < $1`,
	TrimAcked: `DELETE FROM idem_stream_events WHERE seq <= (SELECT MIN(c.seq) FROM idem_stream_clients c
		WHERE c.channel = idem_stream_events.channel)`,
}
