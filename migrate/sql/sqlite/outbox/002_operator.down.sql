DROP INDEX IF EXISTS idem_outbox_parked;
DROP INDEX IF EXISTS idem_outbox_backlog;
DROP TABLE IF EXISTS idem_outbox_relays;
-- Discarded messages then are parked ones again, which Retry would publish.
DROP TABLE IF EXISTS idem_outbox_discarded;
