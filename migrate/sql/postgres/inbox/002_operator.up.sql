-- Operator state of dead letters (inbox.DeadLetterAdmin), written from any process.
-- It lives in a table of its own, keyed by the dead letter's id, so that the
-- migration only adds (SQLite cannot add a column only if it is missing).
--
-- A discarded letter is closed as a replayed one is: its replayed_at is set (so it
-- leaves the pending letters, and their unique index, and is never replayed) and its
-- row here holds discarded_at and the reason. A replay request sets
-- replay_requested_at; the live consumer of the letter replays it, records each
-- failed try (replay_attempts, last_replay_error) and what the replay found
-- (replay_note), and clears the request.
CREATE TABLE IF NOT EXISTS idem_dead_letters_ops (
	id BIGINT PRIMARY KEY, consumer TEXT NOT NULL,
	replay_requested_at BIGINT, replay_reason TEXT NOT NULL DEFAULT '',
	replay_attempts INTEGER NOT NULL DEFAULT 0, last_replay_error TEXT NOT NULL DEFAULT '',
	replay_note TEXT NOT NULL DEFAULT '',
	discarded_at BIGINT, discard_reason TEXT NOT NULL DEFAULT '');
-- The consumer's poll for requested replays probes a nearly empty index.
CREATE INDEX IF NOT EXISTS idem_dead_letters_ops_replay ON idem_dead_letters_ops (consumer, id)
	WHERE replay_requested_at IS NOT NULL;
-- Listing one consumer's letters in id order (keyset pages).
CREATE INDEX IF NOT EXISTS idem_dead_letters_consumer ON idem_dead_letters (consumer, id);
