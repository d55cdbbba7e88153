-- Operator state of the outbox (outbox.Admin), in tables of their own so that the
-- migration only adds.
--
-- A discarded message stays parked (so no pending query of the relay sees it), and
-- its row here says when and why; Retry refuses it.
CREATE TABLE IF NOT EXISTS idem_outbox_discarded (
	id BIGINT PRIMARY KEY, discarded_at BIGINT NOT NULL, reason TEXT NOT NULL);
-- The relays at work: each Relay upserts its row at most once a second, after a
-- round, outside the round's transaction.
CREATE TABLE IF NOT EXISTS idem_outbox_relays (
	instance TEXT PRIMARY KEY, host TEXT NOT NULL, pid BIGINT NOT NULL,
	started_at BIGINT NOT NULL, last_round_at BIGINT NOT NULL, poll_interval_ms BIGINT NOT NULL,
	published_total BIGINT NOT NULL, last_error TEXT NOT NULL DEFAULT '');
-- Admin.Status counts the unpublished rows per topic and partition, with the oldest
-- created_at and the parked ones. No index held the topic, so the count read every
-- unpublished row from the table; this one answers it from the index alone, and
-- holds only unpublished rows.
CREATE INDEX IF NOT EXISTS idem_outbox_backlog ON idem_outbox (topic, part, parked_at, created_at)
	WHERE published_at IS NULL;
-- Admin.Parked pages through the parked messages by id.
CREATE INDEX IF NOT EXISTS idem_outbox_parked ON idem_outbox (id) WHERE parked_at IS NOT NULL AND published_at IS NULL;
