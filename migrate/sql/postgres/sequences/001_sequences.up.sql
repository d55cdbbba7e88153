-- Producers' windows of the SQL sequence tracker (package idemseq): a high watermark
-- and a ring bitmap per (scope, producer).
CREATE TABLE IF NOT EXISTS idem_sequences (
	scope TEXT NOT NULL, producer TEXT NOT NULL,
	epoch BIGINT NOT NULL, next BIGINT NOT NULL, bits BYTEA,
	PRIMARY KEY (scope, producer));
