-- Sagas resolved by hand (saga.Admin.Resolve): the operator's note, the time, and
-- the state the saga was in. Operators page through sagas by state in id order
-- (saga.Admin.List): without (state, id) a listing of the few failed sagas reads
-- every saga. MySQL 8 has no CREATE INDEX IF NOT EXISTS: the statement is prepared
-- only if the index is missing, so the script can run twice.
CREATE TABLE IF NOT EXISTS idem_saga_resolutions (id VARBINARY(255) NOT NULL PRIMARY KEY, previous_state VARCHAR(16) NOT NULL,
	note TEXT NOT NULL, resolved_at BIGINT NOT NULL) ENGINE=InnoDB;
SET @idem_ddl = IF((SELECT COUNT(*) FROM information_schema.statistics WHERE table_schema = DATABASE()
	AND table_name = 'idem_sagas' AND index_name = 'idem_sagas_state') = 0,
	'CREATE INDEX idem_sagas_state ON idem_sagas (state, id)', 'DO 0');
PREPARE idem_ddl FROM @idem_ddl;
EXECUTE idem_ddl;
DEALLOCATE PREPARE idem_ddl;
