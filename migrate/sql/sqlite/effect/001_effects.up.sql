-- External effects behind the fence (package effect): one row per (key, step), PENDING
-- under a lease and a fencing token, then COMPLETE with its result or FAILED.
CREATE TABLE IF NOT EXISTS idem_effects (
	key TEXT NOT NULL, step TEXT NOT NULL, state TEXT NOT NULL, token INTEGER NOT NULL,
	lease_until INTEGER NOT NULL, attempts INTEGER NOT NULL, result BLOB, reason TEXT NOT NULL DEFAULT '',
	created_at INTEGER NOT NULL, updated_at INTEGER NOT NULL, PRIMARY KEY (key, step));
CREATE INDEX IF NOT EXISTS idem_effects_pending ON idem_effects (step, lease_until) WHERE state = 'pending';
