-- The push stream's SQL store (package stream): each channel's head, its events, and
-- each client's acknowledged sequence number. Channels and client ids are keys, so
-- VARBINARY(255) (stream.MaxChannel; SQLStore refuses longer client ids); the other
-- strings are bytes too, compared as PostgreSQL and SQLite compare them. One event
-- per non-empty idempotency key and channel: MySQL has no partial unique index, so a
-- generated column holds a hash of the key when it is set (NULL, which the unique
-- key lets repeat, otherwise).
CREATE TABLE IF NOT EXISTS idem_stream_heads (
	channel VARBINARY(255) NOT NULL PRIMARY KEY, head BIGINT NOT NULL
) ENGINE=InnoDB;
CREATE TABLE IF NOT EXISTS idem_stream_events (
	channel VARBINARY(255) NOT NULL, seq BIGINT NOT NULL, type VARBINARY(255) NOT NULL,
	entity BLOB NOT NULL, data LONGBLOB NULL, ikey BLOB NOT NULL, at BIGINT NOT NULL,
	ikey_hash BINARY(32) AS (IF(ikey <> '', UNHEX(SHA2(ikey, 256)), NULL)) STORED,
	PRIMARY KEY (channel, seq),
	UNIQUE KEY idem_stream_events_key (channel, ikey_hash),
	KEY idem_stream_events_at (at)
) ENGINE=InnoDB;
CREATE TABLE IF NOT EXISTS idem_stream_clients (
	channel VARBINARY(255) NOT NULL, client VARBINARY(255) NOT NULL, seq BIGINT NOT NULL,
	seen BIGINT NOT NULL, PRIMARY KEY (channel, client)
) ENGINE=InnoDB;
