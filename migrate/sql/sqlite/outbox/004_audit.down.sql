-- The audit then finds no record of past repairs, and may repair a message again.
DROP TABLE IF EXISTS idem_outbox_repairs;
