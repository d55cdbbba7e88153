-- Operator state of the outbox (outbox.Admin), in tables of their own.
--
-- A discarded message stays parked (so no pending query of the relay sees it), and
-- its row here says when and why; Retry refuses it.
CREATE TABLE IF NOT EXISTS idem_outbox_discarded (
	id BIGINT NOT NULL PRIMARY KEY, discarded_at BIGINT NOT NULL, reason TEXT NOT NULL
) ENGINE=InnoDB;
-- The relays at work: each Relay upserts its row at most once a second, after a
-- round, outside the round's transaction.
CREATE TABLE IF NOT EXISTS idem_outbox_relays (
	instance VARBINARY(255) NOT NULL PRIMARY KEY, host VARCHAR(255) NOT NULL, pid BIGINT NOT NULL,
	started_at BIGINT NOT NULL, last_round_at BIGINT NOT NULL, poll_interval_ms BIGINT NOT NULL,
	published_total BIGINT NOT NULL, last_error TEXT NOT NULL DEFAULT ('')
) ENGINE=InnoDB;
-- Admin.Status counts the unpublished rows per topic and partition, with the oldest
-- created_at and the parked ones. No index held the topic, so the count read every
-- unpublished row from the table; idem_outbox_backlog answers it from the index
-- alone. MySQL cannot add an index only if it is missing, so the statement is chosen
-- by looking first: the migration can run again.
SET @idem_ddl = IF((SELECT COUNT(*) FROM information_schema.statistics WHERE table_schema = DATABASE()
	AND table_name = 'idem_outbox' AND index_name = 'idem_outbox_backlog') = 0,
	'ALTER TABLE idem_outbox ADD KEY idem_outbox_backlog (published_at, topic, part, parked_at, created_at)', 'DO 0');
PREPARE idem_ddl FROM @idem_ddl;
EXECUTE idem_ddl;
DEALLOCATE PREPARE idem_ddl;
