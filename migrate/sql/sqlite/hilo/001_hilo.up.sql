-- Hi/Lo block sources on SQLite (idemseq.SQLiteTable): one row per name, holding the
-- first id of the next block and the block size. (On PostgreSQL each source is a
-- sequence of its own, created by idemseq.PostgresSequence.)
CREATE TABLE IF NOT EXISTS idem_hilo (
	name  TEXT PRIMARY KEY,
	next  INTEGER NOT NULL,
	block INTEGER NOT NULL
);
