-- The inbox counts each consumer's open letters for idem_inbox_dead_letters_open
-- every 30 s, and reads them in id order (DeadLetters). Closed letters stay for
-- audit and are never deleted: through idem_dead_letters_consumer that count would
-- read every letter the consumer ever had. This index holds the open ones alone.
-- (MySQL's idem_dead_letters_consumer is (consumer, replayed_at, id) already.)
CREATE INDEX IF NOT EXISTS idem_dead_letters_open ON idem_dead_letters (consumer, id) WHERE replayed_at IS NULL;
