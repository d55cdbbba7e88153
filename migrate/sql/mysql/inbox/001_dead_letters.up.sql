-- The inbox's dead letters (package inbox): every message a consumer gave up on, with
-- why, until Replay or Discard. One pending dead letter per message id and consumer:
-- MySQL has no partial unique index, so a generated column holds a hash of the id
-- while the letter is pending (NULL, which the unique key lets repeat, otherwise).
CREATE TABLE IF NOT EXISTS idem_dead_letters (
	id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
	consumer VARBINARY(255) NOT NULL, msg_id BLOB NOT NULL, topic TEXT NOT NULL,
	position TEXT NOT NULL, headers MEDIUMTEXT NOT NULL, payload LONGBLOB NOT NULL, kind VARCHAR(32) NOT NULL,
	reason TEXT NOT NULL, attempts INT NOT NULL, first_at BIGINT NOT NULL, dead_at BIGINT NOT NULL,
	replayed_at BIGINT NULL,
	pending_msg BINARY(32) AS (IF(replayed_at IS NULL AND msg_id <> '', UNHEX(SHA2(msg_id, 256)), NULL)) STORED,
	UNIQUE KEY idem_dead_letters_pending (consumer, pending_msg),
	KEY idem_dead_letters_consumer (consumer, replayed_at, id)
) ENGINE=InnoDB;
