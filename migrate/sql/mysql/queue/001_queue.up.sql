-- The database as the queue (package queue) on MySQL/MariaDB: EnqueueTx writes a row
-- in the caller's transaction; a Source leases due rows (attempts is the lease's
-- fencing token, available_at its end), and the inbox finishes each in the
-- transaction of its effect (finished_at, outcome). MySQL has no partial indexes:
-- unfinished_msg_id is msg_id while the row is unfinished and NULL after, so its
-- unique key allows one unfinished row per topic and msg_id.
CREATE TABLE IF NOT EXISTS idem_queue (
	id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
	topic VARCHAR(255) NOT NULL,
	msg_id VARCHAR(255) NOT NULL,
	ordering_key VARBINARY(255) NOT NULL DEFAULT '',
	headers MEDIUMTEXT NOT NULL,
	payload LONGBLOB NOT NULL,
	created_at BIGINT NOT NULL,
	available_at BIGINT NOT NULL,
	attempts INT NOT NULL DEFAULT 0,
	leased_by VARCHAR(255) NOT NULL DEFAULT '',
	last_error TEXT NOT NULL DEFAULT (''),
	finished_at BIGINT NULL,
	outcome VARCHAR(16) NOT NULL DEFAULT '',
	unfinished_msg_id VARCHAR(255) AS (IF(finished_at IS NULL, msg_id, NULL)) STORED,
	UNIQUE KEY idem_queue_unique (topic, unfinished_msg_id),
	KEY idem_queue_due (topic, finished_at, available_at, id),
	KEY idem_queue_key (topic, ordering_key, finished_at, id),
	KEY idem_queue_finished (finished_at)
) ENGINE=InnoDB;

-- The last tick of each periodic schedule: the process that moves it enqueues the
-- tick's message in the same transaction, so a tick is enqueued once.
CREATE TABLE IF NOT EXISTS idem_queue_periodic (
	name VARCHAR(255) NOT NULL PRIMARY KEY,
	last_tick BIGINT NOT NULL
) ENGINE=InnoDB;
