SET @idem_ddl = IF((SELECT COUNT(*) FROM information_schema.statistics WHERE table_schema = DATABASE()
	AND table_name = 'idem_dead_letters' AND index_name = 'idem_dead_letters_msg') > 0,
	'ALTER TABLE idem_dead_letters DROP KEY idem_dead_letters_msg', 'DO 0');
PREPARE idem_ddl FROM @idem_ddl;
EXECUTE idem_ddl;
DEALLOCATE PREPARE idem_ddl;
