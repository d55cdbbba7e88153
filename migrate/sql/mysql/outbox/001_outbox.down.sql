DROP TABLE IF EXISTS idem_outbox_parts;
DROP TABLE IF EXISTS idem_outbox;
