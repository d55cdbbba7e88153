DROP INDEX IF EXISTS idem_dead_letters_consumer;
-- Discarded letters then look replayed.
DROP TABLE IF EXISTS idem_dead_letters_ops;
