-- Sagas (package effect/saga): one row per saga instance, advanced under a lease.
CREATE TABLE IF NOT EXISTS idem_sagas (
	id VARBINARY(255) NOT NULL PRIMARY KEY, saga VARCHAR(255) NOT NULL, state VARCHAR(16) NOT NULL,
	step INT NOT NULL, data LONGBLOB NOT NULL, results LONGTEXT NOT NULL, attempts INT NOT NULL,
	reason TEXT NOT NULL, next_at BIGINT NOT NULL, lease_until BIGINT NOT NULL, token BIGINT NOT NULL,
	created_at BIGINT NOT NULL, updated_at BIGINT NOT NULL,
	KEY idem_sagas_due (state, next_at)
) ENGINE=InnoDB;
