-- The transactional outbox (package outbox) on MySQL/MariaDB. MySQL has no partial
-- indexes: the pending index leads with the two columns a pending row has NULL.
CREATE TABLE IF NOT EXISTS idem_outbox (
	id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
	msg_id VARCHAR(255) NOT NULL,
	topic VARCHAR(255) NOT NULL,
	ordering_key VARBINARY(255) NOT NULL DEFAULT '',
	part INT NOT NULL,
	headers TEXT NOT NULL,
	payload LONGBLOB NOT NULL,
	created_at BIGINT NOT NULL,
	available_at BIGINT NOT NULL,
	attempts INT NOT NULL DEFAULT 0,
	last_error TEXT NOT NULL DEFAULT (''),
	published_at BIGINT NULL,
	parked_at BIGINT NULL,
	KEY idem_outbox_pending (published_at, parked_at, part, id),
	KEY idem_outbox_key (ordering_key, id)
) ENGINE=InnoDB;

-- The ordering partitions (outbox.Partitions of them), one row each: a relay round
-- locks the rows of the partitions it publishes, FOR UPDATE SKIP LOCKED, as the
-- PostgreSQL relay takes advisory locks.
CREATE TABLE IF NOT EXISTS idem_outbox_parts (
	part INT NOT NULL PRIMARY KEY
) ENGINE=InnoDB;
INSERT IGNORE INTO idem_outbox_parts (part) VALUES (0),(1),(2),(3),(4),(5),(6),(7),(8),(9),(10),(11),(12),(13),(14),(15),(16),(17),(18),(19),(20),(21),(22),(23),(24),(25),(26),(27),(28),(29),(30),(31),(32),(33),(34),(35),(36),(37),(38),(39),(40),(41),(42),(43),(44),(45),(46),(47),(48),(49),(50),(51),(52),(53),(54),(55),(56),(57),(58),(59),(60),(61),(62),(63);
