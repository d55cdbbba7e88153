-- The records table of idem.Store on SQLite (idemsqlite), and the last token issued.
-- Records, one per key. WITHOUT ROWID keeps each record in the primary-key b-tree
-- itself: a claim writes one b-tree (plus the expiry index) instead of a rowid table
-- and a separate key index. Times are unix nanoseconds of the store's clock.
CREATE TABLE IF NOT EXISTS idem_records (
	scope        TEXT    NOT NULL,
	id           TEXT    NOT NULL,
	state        INTEGER NOT NULL,          -- 1 in progress, 2 completed (idem.State)
	fingerprint  BLOB,                      -- NULL and x'' are the same intent
	token        INTEGER NOT NULL,          -- fencing token of the current holder
	result       BLOB,                      -- NULL while in progress
	retention_ns INTEGER NOT NULL,          -- from the claim; applied by Complete
	created_ns   INTEGER NOT NULL,
	expires_ns   INTEGER NOT NULL,          -- end of the lease, then of the retention
	PRIMARY KEY (scope, id)
) WITHOUT ROWID;

-- The sweeper deletes by expiry.
CREATE INDEX IF NOT EXISTS idem_records_expires ON idem_records (expires_ns);

-- The highest fencing token ever issued on this file. Every transaction that issues a
-- token raises it, so tokens keep rising across released and swept keys, restarts,
-- clock steps and other processes writing the same file.
CREATE TABLE IF NOT EXISTS idem_meta (
	id         INTEGER PRIMARY KEY CHECK (id = 1),
	last_token INTEGER NOT NULL
);
INSERT OR IGNORE INTO idem_meta (id, last_token) VALUES (1, 0);
