-- The audit (package audit) asks which of a page's message ids a consumer
-- dead-lettered, its letters open or closed: one probe of this index per id.
-- (idem_dead_letters_pending holds the open letters alone.)
CREATE INDEX IF NOT EXISTS idem_dead_letters_msg ON idem_dead_letters (consumer, msg_id);
