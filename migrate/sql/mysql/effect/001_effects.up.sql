-- External effects behind the fence (package effect): one row per (key, step), PENDING
-- under a lease and a fencing token, then COMPLETE with its result or FAILED. key is
-- a reserved word in MySQL: quoted here and in the fence's statements.
CREATE TABLE IF NOT EXISTS idem_effects (
	`key` VARBINARY(255) NOT NULL, step VARBINARY(128) NOT NULL, state VARCHAR(16) NOT NULL, token BIGINT NOT NULL,
	lease_until BIGINT NOT NULL, attempts INT NOT NULL, result LONGBLOB NULL, reason TEXT NOT NULL DEFAULT (''),
	created_at BIGINT NOT NULL, updated_at BIGINT NOT NULL, PRIMARY KEY (`key`, step),
	KEY idem_effects_pending (step, state, lease_until)
) ENGINE=InnoDB;
