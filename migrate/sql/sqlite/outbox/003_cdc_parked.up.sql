-- Messages the log-based relay (idempg/pgcdc) parked. That relay reads the
-- table's inserts only, so Retry puts such a message back in line as a new row
-- (an insert, which it reads) instead of clearing parked_at; the row here says so.
-- Only one dialect has that relay; the table exists on every one so that Retry
-- reads the same everywhere.
CREATE TABLE IF NOT EXISTS idem_outbox_cdc_parked (id INTEGER PRIMARY KEY);
