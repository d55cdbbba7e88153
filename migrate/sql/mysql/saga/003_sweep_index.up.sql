-- The retention sweeper (saga.Sweeper, Admin.Purge) deletes finished sagas
-- (completed, compensated, resolved) whose last change is older than the
-- retention, a batch at a time: a range of this index per finished state. MySQL 8
-- has no CREATE INDEX IF NOT EXISTS: the statement is prepared only if the index
-- is missing, so the script can run twice.
SET @idem_ddl = IF((SELECT COUNT(*) FROM information_schema.statistics WHERE table_schema = DATABASE()
	AND table_name = 'idem_sagas' AND index_name = 'idem_sagas_done') = 0,
	'CREATE INDEX idem_sagas_done ON idem_sagas (state, updated_at)', 'DO 0');
PREPARE idem_ddl FROM @idem_ddl;
EXECUTE idem_ddl;
DEALLOCATE PREPARE idem_ddl;
