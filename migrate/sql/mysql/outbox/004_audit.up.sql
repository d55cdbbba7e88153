-- The audit (package audit) reads the published messages of a window in keyset
-- order (published_at, id), a page at a time, and repairs a message a consumer
-- never got by publishing a copy of its row under the same msg_id.
--
-- Each repair is recorded: the copy's id, the original's, who missed it and why.
-- RepairsOf reads a page's originals from idem_outbox_repairs_orig alone.
CREATE TABLE IF NOT EXISTS idem_outbox_repairs (
	copy_id BIGINT NOT NULL PRIMARY KEY, orig_id BIGINT NOT NULL,
	msg_id VARCHAR(255) NOT NULL, topic VARCHAR(255) NOT NULL,
	consumers TEXT NOT NULL, reason TEXT NOT NULL, repaired_at BIGINT NOT NULL,
	KEY idem_outbox_repairs_orig (orig_id, repaired_at)
) ENGINE=InnoDB;
-- A page of the audit is a range of this index, whose entries end with the
-- primary key (id): in the page's order, so the LIMIT ends the read. The indexes
-- that lead with published_at go on with other columns (idem_outbox_pending,
-- idem_outbox_backlog), and through them each page would sort the rest of the
-- window. Added only if missing, as in 002_operator, so the migration can run
-- again.
SET @idem_ddl = IF((SELECT COUNT(*) FROM information_schema.statistics WHERE table_schema = DATABASE()
	AND table_name = 'idem_outbox' AND index_name = 'idem_outbox_published') = 0,
	'ALTER TABLE idem_outbox ADD KEY idem_outbox_published (published_at)', 'DO 0');
PREPARE idem_ddl FROM @idem_ddl;
EXECUTE idem_ddl;
DEALLOCATE PREPARE idem_ddl;
