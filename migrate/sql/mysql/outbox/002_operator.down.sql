SET @idem_ddl = IF((SELECT COUNT(*) FROM information_schema.statistics WHERE table_schema = DATABASE()
	AND table_name = 'idem_outbox' AND index_name = 'idem_outbox_backlog') > 0,
	'ALTER TABLE idem_outbox DROP KEY idem_outbox_backlog', 'DO 0');
PREPARE idem_ddl FROM @idem_ddl;
EXECUTE idem_ddl;
DEALLOCATE PREPARE idem_ddl;
DROP TABLE IF EXISTS idem_outbox_relays;
-- Discarded messages then are parked ones again, which Retry would publish.
DROP TABLE IF EXISTS idem_outbox_discarded;
