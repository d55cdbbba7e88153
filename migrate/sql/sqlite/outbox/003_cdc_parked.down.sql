-- Retry then clears parked_at of such a message, which the log-based relay never sees.
DROP TABLE IF EXISTS idem_outbox_cdc_parked;
