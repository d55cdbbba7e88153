-- The log-based relay's (idempg/pgcdc) state: one row per replication slot, which
-- says that it had that slot, so that a slot lost to a failover, a drop or
-- max_slot_wal_keep_size is found and the outbox rows committed meanwhile are
-- published (slot-loss recovery). Created here so that the relay's role needs no
-- CREATE on the schema: grant it SELECT, INSERT, UPDATE on this table.
-- Only PostgreSQL has that relay.
CREATE TABLE IF NOT EXISTS idem_cdc_slots (
	slot TEXT PRIMARY KEY,
	epoch INTEGER NOT NULL,
	created_lsn PG_LSN NOT NULL,
	confirmed_lsn PG_LSN NOT NULL,
	recovering BOOLEAN NOT NULL DEFAULT FALSE,
	retired BOOLEAN NOT NULL DEFAULT FALSE,
	gap_lsn PG_LSN,
	gap_base BIGINT,
	updated_at BIGINT NOT NULL);
