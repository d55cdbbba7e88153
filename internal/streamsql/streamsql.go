// Package streamsql holds the statements of idemsql's stream family whose text
// the drivers of this module (idempg, idemsqlite, idemmysql) share: Stream
// returns them, and OnConflict is the whole family of the databases that speak ON
// CONFLICT and RETURNING and have partial indexes (PostgreSQL, SQLite). MySQL's
// driver adds its own statements to Stream's.
package streamsql

import "github.com/idemhq/idem/idemsql"

// Stream returns the statements the drivers share; it leaves EventByKey,
// NextHead (and NextHeadRead) and Ack to the driver.
func Stream() idemsql.StreamSQL {
	return idemsql.StreamSQL{
		InsertEvent: `INSERT INTO idem_stream_events (channel, seq, type, entity, data, ikey, at) VALUES ($1, $2, $3, $4, $5, $6, $7)`,
		ReadEvents:  `SELECT seq, type, entity, data, at FROM idem_stream_events WHERE channel = $1 AND seq > $2 ORDER BY seq LIMIT $3`,
		Head:        `SELECT head FROM idem_stream_heads WHERE channel = $1`,

		ForgetIdleClients: `DELETE FROM idem_stream_clients WHERE seen < $1`,
		ForgetExtraClients: `DELETE FROM idem_stream_clients WHERE (channel, client) IN (SELECT channel, client FROM
			(SELECT channel, client, ROW_NUMBER() OVER (PARTITION BY channel ORDER BY seen DESC, client) AS n
			FROM idem_stream_clients) ranked WHERE n > $1)`,
		TrimOld: `DELETE FROM idem_stream_events WHERE at < $1`,
		TrimAcked: `DELETE FROM idem_stream_events WHERE seq <= (SELECT MIN(c.seq) FROM idem_stream_clients c
			WHERE c.channel = idem_stream_events.channel)`,
	}
}

// OnConflict returns the whole family for a database that speaks ON CONFLICT and
// RETURNING and has partial indexes (PostgreSQL, SQLite).
func OnConflict() idemsql.StreamSQL {
	s := Stream()
	// ikey <> '' is the partial unique index's own condition: without it in the
	// query, SQLite (and a generic Postgres plan) cannot prove the index covers the
	// row and reads the whole channel instead, an append growing with its channel.
	s.EventByKey = `SELECT seq, type, entity, data, at FROM idem_stream_events WHERE channel = $1 AND ikey = $2 AND ikey <> ''`
	s.NextHead = `INSERT INTO idem_stream_heads (channel, head) VALUES ($1, 1)
		ON CONFLICT (channel) DO UPDATE SET head = idem_stream_heads.head + 1 RETURNING head`
	s.Ack = `INSERT INTO idem_stream_clients (channel, client, seq, seen) VALUES ($1, $2, $3, $4)
		ON CONFLICT (channel, client) DO UPDATE SET seen = excluded.seen,
		seq = CASE WHEN excluded.seq > idem_stream_clients.seq THEN excluded.seq ELSE idem_stream_clients.seq END`
	return s
}
