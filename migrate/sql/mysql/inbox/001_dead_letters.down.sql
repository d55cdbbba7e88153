DROP TABLE IF EXISTS idem_dead_letters;
