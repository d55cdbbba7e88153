package idemmysql

import "github.com/idemhq/idem/idemsql"

func (driver) Inbox() *idemsql.InboxSQL { return &inboxStmts }

// selectDeadLetter reads dead letters with their operator state, in the columns
// of idemsql.InboxSQL; a WHERE follows it.
const selectDeadLetter = `SELECT d.id, d.consumer, d.msg_id, d.topic, d.position, d.headers, d.payload, d.kind,
	d.reason, d.attempts, d.first_at, d.dead_at, d.replayed_at, o.replay_requested_at, COALESCE(o.replay_reason, ''),
	COALESCE(o.replay_attempts, 0), COALESCE(o.last_replay_error, ''), COALESCE(o.replay_note, ''),
	o.discarded_at, COALESCE(o.discard_reason, '')
	FROM idem_dead_letters d LEFT JOIN idem_dead_letters_ops o ON o.id = d.id `

var inboxStmts = idemsql.InboxSQL{
	// Not INSERT IGNORE, which would also turn a value too long for its column into
	// a warning: the duplicate alone is skipped.
	InsertDeadLetter: `INSERT INTO idem_dead_letters
		(consumer, msg_id, topic, position, headers, payload, kind, reason, attempts, first_at, dead_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)
		ON DUPLICATE KEY UPDATE id = id`,

	DeadLetter:          selectDeadLetter + "WHERE d.id = $1",
	OpenDeadLetters:     selectDeadLetter + "WHERE d.consumer = $1 AND d.replayed_at IS NULL ORDER BY d.id LIMIT $2",
	OpenDeadLetter:      selectDeadLetter + "WHERE d.id = $1 AND d.consumer = $2 AND d.replayed_at IS NULL",
	RequestedDeadLetter: selectDeadLetter + "WHERE d.id = $1 AND d.consumer = $2 AND d.replayed_at IS NULL AND o.replay_requested_at IS NOT NULL",
	ListDeadLetters:     func(c idemsql.DeadLetterConds) string { return selectDeadLetter + c.Clause() },

	LockDeadLetter:      "SELECT consumer, replayed_at FROM idem_dead_letters WHERE id = $1 FOR UPDATE",
	CloseDeadLetter:     "UPDATE idem_dead_letters SET replayed_at = $1 WHERE id = $2",
	CloseOpenDeadLetter: "UPDATE idem_dead_letters SET replayed_at = $1 WHERE id = $2 AND replayed_at IS NULL",

	RequestReplay: `INSERT INTO idem_dead_letters_ops (id, consumer, replay_requested_at, replay_reason) VALUES ($1, $2, $3, $4)
		ON DUPLICATE KEY UPDATE replay_requested_at = VALUES(replay_requested_at), replay_reason = VALUES(replay_reason),
		replay_attempts = 0, last_replay_error = ''`,
	DiscardDeadLetter: `INSERT INTO idem_dead_letters_ops (id, consumer, discarded_at, discard_reason) VALUES ($1, $2, $3, $4)
		ON DUPLICATE KEY UPDATE discarded_at = VALUES(discarded_at), discard_reason = VALUES(discard_reason),
		replay_requested_at = NULL`,
	NoteReplay: `INSERT INTO idem_dead_letters_ops (id, consumer, replay_note) VALUES ($1, $2, $3)
		ON DUPLICATE KEY UPDATE replay_note = VALUES(replay_note), replay_requested_at = NULL`,
	RequestedReplays: `SELECT o.id, o.replay_attempts FROM idem_dead_letters_ops o JOIN idem_dead_letters d ON d.id = o.id
		WHERE o.consumer = $1 AND o.replay_requested_at IS NOT NULL AND d.replayed_at IS NULL ORDER BY o.id LIMIT $2`,
	ReplayFailed: `UPDATE idem_dead_letters_ops SET replay_attempts = replay_attempts + 1, last_replay_error = $1
		WHERE id = $2 AND replay_requested_at IS NOT NULL`,
	ReplayGaveUp: `UPDATE idem_dead_letters_ops SET replay_attempts = replay_attempts + 1, last_replay_error = $1,
		replay_requested_at = NULL WHERE id = $2 AND replay_requested_at IS NOT NULL`,

	// No RETURNING: lock the row, then compare and update (LSNAdvance left empty).
	LSNEnsure: `INSERT INTO idem_sequences (scope, producer, epoch, next, bits) VALUES ($1, $2, 0, 0, NULL)
		ON DUPLICATE KEY UPDATE epoch = epoch`,
	LSNLock:      `SELECT epoch, next FROM idem_sequences WHERE scope = $1 AND producer = $2 FOR UPDATE`,
	LSNSet:       `UPDATE idem_sequences SET epoch = $3, next = $4 WHERE scope = $1 AND producer = $2`,
	LSNWatermark: `SELECT epoch, next FROM idem_sequences WHERE scope = $1 AND producer = $2`,
}
