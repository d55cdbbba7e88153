-- The push stream's SQL store (package stream): each channel's head, its events, and
-- each client's acknowledged sequence number.
CREATE TABLE IF NOT EXISTS idem_stream_heads (channel TEXT PRIMARY KEY, head BIGINT NOT NULL);
CREATE TABLE IF NOT EXISTS idem_stream_events (channel TEXT NOT NULL, seq BIGINT NOT NULL, type TEXT NOT NULL,
	entity TEXT NOT NULL, data BLOB, ikey TEXT NOT NULL, at BIGINT NOT NULL, PRIMARY KEY (channel, seq));
CREATE UNIQUE INDEX IF NOT EXISTS idem_stream_events_key ON idem_stream_events (channel, ikey) WHERE ikey <> '';
CREATE INDEX IF NOT EXISTS idem_stream_events_at ON idem_stream_events (at);
CREATE TABLE IF NOT EXISTS idem_stream_clients (channel TEXT NOT NULL, client TEXT NOT NULL, seq BIGINT NOT NULL,
	seen BIGINT NOT NULL, PRIMARY KEY (channel, client));
