-- The transactional outbox (package outbox): EnqueueTx writes a row in the caller's
-- transaction; the relay publishes it and sets published_at, or parks it after
-- MaxAttempts. part is the ordering partition (a hash of the ordering key).
CREATE TABLE IF NOT EXISTS idem_outbox (
	id INTEGER PRIMARY KEY AUTOINCREMENT,
	msg_id TEXT NOT NULL,
	topic TEXT NOT NULL,
	ordering_key TEXT NOT NULL DEFAULT '',
	part INTEGER NOT NULL,
	headers TEXT NOT NULL DEFAULT '{}',
	payload BLOB NOT NULL,
	created_at INTEGER NOT NULL,
	available_at INTEGER NOT NULL,
	attempts INTEGER NOT NULL DEFAULT 0,
	last_error TEXT NOT NULL DEFAULT '',
	published_at INTEGER,
	parked_at INTEGER);
CREATE INDEX IF NOT EXISTS idem_outbox_pending ON idem_outbox (id) WHERE published_at IS NULL AND parked_at IS NULL;
CREATE INDEX IF NOT EXISTS idem_outbox_part ON idem_outbox (part, id) WHERE published_at IS NULL AND parked_at IS NULL;
CREATE INDEX IF NOT EXISTS idem_outbox_failing ON idem_outbox (ordering_key, id) WHERE published_at IS NULL AND parked_at IS NULL AND attempts > 0;
CREATE INDEX IF NOT EXISTS idem_outbox_published ON idem_outbox (published_at) WHERE published_at IS NOT NULL;
