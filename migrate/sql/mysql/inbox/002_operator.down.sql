-- Discarded letters then look replayed.
DROP TABLE IF EXISTS idem_dead_letters_ops;
