-- Producers' windows of the SQL sequence tracker (package idemseq): a high watermark
-- and a ring bitmap per (scope, producer).
CREATE TABLE IF NOT EXISTS idem_sequences (
	scope TEXT NOT NULL, producer TEXT NOT NULL,
	epoch INTEGER NOT NULL, next INTEGER NOT NULL, bits BLOB,
	PRIMARY KEY (scope, producer));
