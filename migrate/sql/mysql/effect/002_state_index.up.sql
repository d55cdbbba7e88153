-- Operators list the effects that are not complete (pending ones, those past their
-- lease that a recovery would take over, failed ones: effect.Admin.List), page by
-- page in (key, step) order. Without this index such a listing reads every effect
-- ever recorded, nearly all of them complete. MySQL has no partial index: this one
-- holds every effect, and each state change moves its entry. MySQL 8 has no CREATE
-- INDEX IF NOT EXISTS: the statement is prepared only if the index is missing, so
-- the script can run twice.
SET @idem_ddl = IF((SELECT COUNT(*) FROM information_schema.statistics WHERE table_schema = DATABASE()
	AND table_name = 'idem_effects' AND index_name = 'idem_effects_open') = 0,
	'CREATE INDEX idem_effects_open ON idem_effects (state, `key`, step)', 'DO 0');
PREPARE idem_ddl FROM @idem_ddl;
EXECUTE idem_ddl;
DEALLOCATE PREPARE idem_ddl;
