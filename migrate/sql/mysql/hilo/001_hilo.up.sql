-- Hi/Lo block sources on MySQL/MariaDB (idemseq.MySQLTable): one row per name,
-- holding the first id of the next block and the block size.
CREATE TABLE IF NOT EXISTS idem_hilo (
	name  VARBINARY(63) NOT NULL PRIMARY KEY,
	next  BIGINT NOT NULL,
	block BIGINT NOT NULL
) ENGINE=InnoDB;
