-- External effects behind the fence (package effect): one row per (key, step), PENDING
-- under a lease and a fencing token, then COMPLETE with its result or FAILED.
CREATE TABLE IF NOT EXISTS idem_effects (
	key TEXT NOT NULL, step TEXT NOT NULL, state TEXT NOT NULL, token BIGINT NOT NULL,
	lease_until BIGINT NOT NULL, attempts INTEGER NOT NULL, result BYTEA, reason TEXT NOT NULL DEFAULT '',
	created_at BIGINT NOT NULL, updated_at BIGINT NOT NULL, PRIMARY KEY (key, step));
CREATE INDEX IF NOT EXISTS idem_effects_pending ON idem_effects (step, lease_until) WHERE state = 'pending';
