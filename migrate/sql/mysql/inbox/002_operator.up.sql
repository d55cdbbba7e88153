-- Operator state of dead letters (inbox.DeadLetterAdmin), written from any process,
-- in a table of its own keyed by the dead letter's id.
--
-- A discarded letter is closed as a replayed one is: its replayed_at is set (so it
-- leaves the pending letters, and their unique key, and is never replayed) and its
-- row here holds discarded_at and the reason. A replay request sets
-- replay_requested_at; the live consumer of the letter replays it, records each
-- failed try (replay_attempts, last_replay_error) and what the replay found
-- (replay_note), and clears the request. Listing one consumer's letters uses
-- idem_dead_letters_consumer (consumer, replayed_at, id).
CREATE TABLE IF NOT EXISTS idem_dead_letters_ops (
	id BIGINT NOT NULL PRIMARY KEY, consumer VARBINARY(255) NOT NULL,
	replay_requested_at BIGINT NULL, replay_reason TEXT NOT NULL DEFAULT (''),
	replay_attempts INT NOT NULL DEFAULT 0, last_replay_error TEXT NOT NULL DEFAULT (''),
	replay_note TEXT NOT NULL DEFAULT (''),
	discarded_at BIGINT NULL, discard_reason TEXT NOT NULL DEFAULT (''),
	KEY idem_dead_letters_ops_replay (consumer, replay_requested_at, id)
) ENGINE=InnoDB;
