-- Producers' windows of the SQL sequence tracker (package idemseq): a high watermark
-- and a ring bitmap per (scope, producer).
CREATE TABLE IF NOT EXISTS idem_sequences (
	scope VARBINARY(255) NOT NULL, producer VARBINARY(255) NOT NULL,
	epoch BIGINT NOT NULL, next BIGINT NOT NULL, bits LONGBLOB NULL,
	PRIMARY KEY (scope, producer)
) ENGINE=InnoDB;
