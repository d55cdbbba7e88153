DROP TABLE IF EXISTS idem_sequences;
