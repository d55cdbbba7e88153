CREATE INDEX IF NOT EXISTS idem_outbox_published ON idem_outbox (published_at) WHERE published_at IS NOT NULL;
DROP INDEX IF EXISTS idem_outbox_published_id;
-- The audit then finds no record of past repairs, and may repair a message again.
DROP TABLE IF EXISTS idem_outbox_repairs;
