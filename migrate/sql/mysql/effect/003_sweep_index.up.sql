-- The retention sweeper (effect.Sweeper, Admin.Purge) deletes complete effects
-- whose last change is older than the retention, a batch at a time. Without this
-- index each batch reads the table. MySQL has no partial index: this one holds
-- every effect. MySQL 8 has no CREATE INDEX IF NOT EXISTS: the statement is
-- prepared only if the index is missing, so the script can run twice.
SET @idem_ddl = IF((SELECT COUNT(*) FROM information_schema.statistics WHERE table_schema = DATABASE()
	AND table_name = 'idem_effects' AND index_name = 'idem_effects_done') = 0,
	'CREATE INDEX idem_effects_done ON idem_effects (state, updated_at)', 'DO 0');
PREPARE idem_ddl FROM @idem_ddl;
EXECUTE idem_ddl;
DEALLOCATE PREPARE idem_ddl;
