-- The database as the queue (package queue): EnqueueTx writes a row in the caller's
-- transaction; a Source leases due rows (attempts is the lease's fencing token,
-- available_at its end), and the inbox finishes each in the transaction of its
-- effect (finished_at, outcome). Finished rows are kept for the retention, then
-- swept.
CREATE TABLE IF NOT EXISTS idem_queue (
	id BIGSERIAL PRIMARY KEY,
	topic TEXT NOT NULL,
	msg_id TEXT NOT NULL,
	ordering_key TEXT NOT NULL DEFAULT '',
	headers TEXT NOT NULL DEFAULT '{}',
	payload BYTEA NOT NULL,
	created_at BIGINT NOT NULL,
	available_at BIGINT NOT NULL,
	attempts INTEGER NOT NULL DEFAULT 0,
	leased_by TEXT NOT NULL DEFAULT '',
	last_error TEXT NOT NULL DEFAULT '',
	finished_at BIGINT,
	outcome TEXT NOT NULL DEFAULT '');
-- One unfinished row per topic and msg_id: a second enqueue of it is a duplicate.
CREATE UNIQUE INDEX IF NOT EXISTS idem_queue_unique ON idem_queue (topic, msg_id) WHERE finished_at IS NULL;
CREATE INDEX IF NOT EXISTS idem_queue_due ON idem_queue (topic, available_at, id) WHERE finished_at IS NULL;
CREATE INDEX IF NOT EXISTS idem_queue_key ON idem_queue (topic, ordering_key, id) WHERE finished_at IS NULL AND ordering_key <> '';
CREATE INDEX IF NOT EXISTS idem_queue_finished ON idem_queue (finished_at) WHERE finished_at IS NOT NULL;
-- The last tick of each periodic schedule: the process that moves it enqueues the
-- tick's message in the same transaction, so a tick is enqueued once.
CREATE TABLE IF NOT EXISTS idem_queue_periodic (
	name TEXT PRIMARY KEY,
	last_tick BIGINT NOT NULL);
