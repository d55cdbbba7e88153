-- The inbox's dead letters (package inbox): every message a consumer gave up on, with
-- why, until Replay or Discard.
CREATE TABLE IF NOT EXISTS idem_dead_letters (
	id BIGSERIAL PRIMARY KEY, consumer TEXT NOT NULL, msg_id TEXT NOT NULL, topic TEXT NOT NULL,
	position TEXT NOT NULL, headers TEXT NOT NULL, payload BYTEA NOT NULL, kind TEXT NOT NULL,
	reason TEXT NOT NULL, attempts INTEGER NOT NULL, first_at BIGINT NOT NULL, dead_at BIGINT NOT NULL,
	replayed_at BIGINT);
-- One pending dead letter per message id and consumer: a redelivery of a message
-- dead-lettered just before a lost ack does not add a second row.
CREATE UNIQUE INDEX IF NOT EXISTS idem_dead_letters_pending
	ON idem_dead_letters (consumer, msg_id) WHERE replayed_at IS NULL AND msg_id <> '';
