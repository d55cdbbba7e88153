SET @idem_ddl = IF((SELECT COUNT(*) FROM information_schema.statistics WHERE table_schema = DATABASE()
	AND table_name = 'idem_outbox' AND index_name = 'idem_outbox_published') > 0,
	'ALTER TABLE idem_outbox DROP KEY idem_outbox_published', 'DO 0');
PREPARE idem_ddl FROM @idem_ddl;
EXECUTE idem_ddl;
DEALLOCATE PREPARE idem_ddl;
-- The audit then finds no record of past repairs, and may repair a message again.
DROP TABLE IF EXISTS idem_outbox_repairs;
