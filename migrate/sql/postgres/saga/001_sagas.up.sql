-- Sagas (package effect/saga): one row per saga instance, advanced under a lease.
CREATE TABLE IF NOT EXISTS idem_sagas (id TEXT PRIMARY KEY, saga TEXT NOT NULL, state TEXT NOT NULL,
	step INTEGER NOT NULL, data BYTEA NOT NULL, results TEXT NOT NULL, attempts INTEGER NOT NULL,
	reason TEXT NOT NULL, next_at BIGINT NOT NULL, lease_until BIGINT NOT NULL, token BIGINT NOT NULL,
	created_at BIGINT NOT NULL, updated_at BIGINT NOT NULL);
CREATE INDEX IF NOT EXISTS idem_sagas_due ON idem_sagas (next_at) WHERE state IN ('running', 'compensating');
