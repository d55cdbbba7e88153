package idemsql

// InboxSQL is the inbox family of a Driver: the statements package inbox runs
// beyond its key records (which are the store's), on the tables of the migration
// set "inbox" (idem_dead_letters, a consumer's dead letters, and
// idem_dead_letters_ops, their operator state) and, for LSN positions, on
// idem_sequences. Times are Unix milliseconds in BIGINT columns.
//
// Every read of dead letters returns the same columns, in this order (scanned as
// one inbox.DeadLetter): d.id, d.consumer, d.msg_id, d.topic, d.position,
// d.headers, d.payload, d.kind, d.reason, d.attempts, d.first_at, d.dead_at,
// d.replayed_at, o.replay_requested_at, o.replay_reason, o.replay_attempts,
// o.last_replay_error, o.replay_note, o.discarded_at, o.discard_reason — where d is
// the letter and o its operator row, if any: without one, the text columns of o
// read empty, replay_attempts 0 and the times NULL.
type InboxSQL struct {
	// InsertDeadLetter writes a pending dead letter. Args: consumer, msg_id,
	// topic, position, headers (JSON text), payload (bytes, never nil), kind,
	// reason, attempts, first_at, dead_at. When the consumer already has a
	// pending letter (replayed_at NULL) of the same non-empty msg_id, it writes
	// nothing and succeeds (a redelivery of a message dead-lettered just before a
	// lost ack); any other refusal, such as a value too long for its column, must
	// still fail.
	InsertDeadLetter string

	// DeadLetter reads dead letter $1 (id), in whatever state.
	DeadLetter string
	// OpenDeadLetters reads up to $2 open letters (replayed_at NULL) of consumer
	// $1, in id order.
	OpenDeadLetters string
	// CountOpenDeadLetters counts the open letters (replayed_at NULL) of consumer
	// $1, counting no further than $2: one row, one integer column, the count or
	// $2 if there are more. It is the gauge idem_inbox_dead_letters_open, polled
	// by the consumer, so it must search an index by consumer that holds the open
	// letters alone or first (idem_dead_letters_open, or MySQL's
	// idem_dead_letters_consumer on (consumer, replayed_at, id)), never read
	// the closed letters, which are kept for ever.
	CountOpenDeadLetters string
	// OpenDeadLetter reads dead letter $1 (id) if it is open and of consumer $2.
	OpenDeadLetter string
	// RequestedDeadLetter reads as OpenDeadLetter does, and only a letter whose
	// replay an operator requested (o.replay_requested_at set).
	RequestedDeadLetter string
	// ListDeadLetters returns the operator's listing of the letters that match the
	// conditions c holds, in id order. Args: those of the conditions c sets, in
	// the order of DeadLetterConds' fields, then the id the page starts after
	// (d.id > it), then the limit.
	ListDeadLetters func(c DeadLetterConds) string

	// LockDeadLetter reads consumer and replayed_at of dead letter $1 (id), and
	// holds its row until the transaction ends, so that a replay, a discard and a
	// replay request of one letter take turns. Without a lock clause on a database
	// whose transactions hold its write lock from BEGIN (SQLite).
	LockDeadLetter string
	// CloseDeadLetter sets replayed_at = $1 of dead letter $2 (id): a discard
	// closes the letter as a replay does.
	CloseDeadLetter string
	// CloseOpenDeadLetter sets replayed_at = $1 of dead letter $2 (id) only if it
	// is still NULL; the rows it affects (0 or 1) say whether it closed it.
	CloseOpenDeadLetter string

	// RequestReplay writes the operator row of dead letter $1 (id) of consumer
	// $2, inserting or updating it: replay_requested_at = $3, replay_reason = $4,
	// and replay_attempts = 0, last_replay_error = '' (a new request starts over).
	RequestReplay string
	// DiscardDeadLetter writes the operator row of dead letter $1 of consumer $2,
	// inserting or updating it: discarded_at = $3, discard_reason = $4, and
	// replay_requested_at = NULL.
	DiscardDeadLetter string
	// NoteReplay writes the operator row of dead letter $1 of consumer $2,
	// inserting or updating it: replay_note = $3 and replay_requested_at = NULL.
	NoteReplay string
	// RequestedReplays reads id and replay_attempts of the operator rows of
	// consumer $1 whose replay is requested and whose letter is open, in id order,
	// at most $2.
	RequestedReplays string
	// ReplayFailed counts a failed requested replay of dead letter $2 (id), while
	// it is requested: replay_attempts + 1 and last_replay_error = $1.
	ReplayFailed string
	// ReplayGaveUp is ReplayFailed that also withdraws the request
	// (replay_requested_at = NULL).
	ReplayGaveUp string

	// The LSN watermarks of inbox.LSNTracker are rows of idem_sequences (scope,
	// producer: the source), epoch holding the commit LSN and next the index + 1.

	// LSNAdvance, where the database can do it in one statement, moves the
	// watermark of scope $1 and producer $2 to epoch $3 and next $4 if that is
	// above it ({epoch, next} compared in order), inserting the row if missing,
	// and returns one row (any column) when it moved it, none when it did not.
	// The row stays locked until the transaction ends. Empty where the database
	// cannot (MySQL has no RETURNING): LSNEnsure, LSNLock and LSNSet run instead,
	// the comparison made in Go.
	LSNAdvance string
	// LSNEnsure, where LSNAdvance is empty, inserts the row of scope $1 and
	// producer $2 as {0, 0} if missing, and leaves it as it is otherwise (without
	// an error).
	LSNEnsure string
	// LSNLock, where LSNAdvance is empty, reads epoch and next of scope $1 and
	// producer $2, locking the row until the transaction ends.
	LSNLock string
	// LSNSet, where LSNAdvance is empty, sets epoch = $3 and next = $4 of scope
	// $1 and producer $2.
	LSNSet string
	// LSNWatermark reads epoch and next of scope $1 and producer $2, without a lock.
	LSNWatermark string

	// DeadLettered returns the statement the audit (package audit) reads which of
	// n message ids a consumer dead-lettered with: $1 consumer, $2..$n+1 msg_ids.
	// Returns msg_id and the earliest dead_at of its letters, open or closed, one
	// row per msg_id that has any. An index on (consumer, msg_id) serves it
	// (idem_dead_letters_msg).
	DeadLettered func(n int) string
}

// DeadLetterConds says which conditions an operator's listing of dead letters
// (InboxSQL.ListDeadLetters) has; each one set takes an argument, in the order of
// the fields.
type DeadLetterConds struct {
	Consumer bool // d.consumer = the argument
	Kind     bool // d.kind = the argument
	// Reason: LOWER(d.reason) LIKE the argument, a lower-case pattern whose
	// metacharacters are escaped with '!'.
	Reason bool
	Since  bool // d.dead_at >= the argument
	Until  bool // d.dead_at < the argument
	// IncludeDone lists closed letters too; it takes no argument.
	IncludeDone bool
}
