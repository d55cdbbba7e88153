-- The audit (package audit) asks which of a page's message ids a consumer
-- dead-lettered, its letters open or closed: one probe of this index per id.
-- msg_id is a BLOB, indexed by its first 255 bytes: the whole of any message id
-- (idem.MaxKeyLen). Added only if missing, so the migration can run again.
SET @idem_ddl = IF((SELECT COUNT(*) FROM information_schema.statistics WHERE table_schema = DATABASE()
	AND table_name = 'idem_dead_letters' AND index_name = 'idem_dead_letters_msg') = 0,
	'ALTER TABLE idem_dead_letters ADD KEY idem_dead_letters_msg (consumer, msg_id(255))', 'DO 0');
PREPARE idem_ddl FROM @idem_ddl;
EXECUTE idem_ddl;
DEALLOCATE PREPARE idem_ddl;
