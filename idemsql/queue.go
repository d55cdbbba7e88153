package idemsql

// QueueNotifyChannel is the PostgreSQL channel queue.EnqueueTx notifies at commit
// and a queue Source listens on (idempg.NewNotifier).
const QueueNotifyChannel = "idem_queue"

// The outcomes a finished queue row records (QueueSQL's outcome column).
const (
	QueueApplied   = "applied"   // its effect committed with its retirement
	QueueDuplicate = "duplicate" // its key was recorded already: nothing applied
	QueueDead      = "dead"      // dead-lettered (the inbox's idem_dead_letters holds why) or undecodable
	QueueCancelled = "cancelled" // cancelled before it was applied
	QueueAcked     = "acked"     // settled by a consumer in another database: applied, a duplicate or dead-lettered there
)

// QueueSQL is the queue family of a Driver: every statement package queue runs
// on the tables of the migration set "queue" (idem_queue, the messages;
// idem_queue_periodic, the last tick of each periodic schedule), with the
// arguments each takes, in order, and the columns each returns. Times are Unix
// milliseconds in BIGINT columns.
//
// A row is unfinished while finished_at is NULL, and then due when available_at
// <= now. A claim leases a row: attempts + 1, available_at = the lease's end,
// leased_by = the worker. attempts is the lease's fencing token: every statement
// that settles a claimed row (Retire, Nak, Extend, Finish) names the row by id
// and attempts, and affects nothing once another claim took the row (its lease
// ran out) or it was cancelled; the caller learns it from the affected count. A
// row of a non-empty ordering_key is due only when no unfinished row of its topic
// and ordering_key has a lower id, so one key's messages run one at a time, in
// id order. At most one unfinished row has a given topic and msg_id (a unique
// index): a second Insert of it is a duplicate and writes nothing.
type QueueSQL struct {
	// Insert writes one message unless an unfinished row of its topic and msg_id
	// exists (then it affects no row, without an error): msg_id, topic,
	// ordering_key, headers, payload, created_at, available_at.
	Insert string
	// InsertArrays, where the database takes arrays as parameters, writes a batch
	// in one statement, used instead of Insert: msg_ids, topics, ordering_keys,
	// headers (text[]), payloads (bytea[]), available_ats (bigint[]), then
	// created_at; rows in the arrays' order, each skipped when it is a duplicate
	// (of an unfinished row or of an earlier element). It returns topic and msg_id
	// of each row it wrote.
	InsertArrays string
	// InsertArraysNotify is InsertArrays that also sends NOTIFY idem_queue at
	// commit (QueueNotifyChannel), in the same round trip.
	InsertArraysNotify string

	// Every claim returns the rows it leased, with the columns: id, attempts (the
	// new count: the lease's token), created_at, msg_id, ordering_key, then
	// headers and payload each as two columns: its value when it is at most
	// OutboxMaxHeadersBytes (headers) or idem.MaxPayload (payload) long and NULL
	// when longer, then its length in bytes.

	// Claim leases up to $5 due rows of topic $4 at $1, in (available_at, id)
	// order, skipping rows another transaction holds: attempts + 1,
	// available_at = $2 (the lease's end), leased_by = $3.
	Claim string
	// ClaimLock, where the database cannot return an UPDATE's rows (MySQL),
	// reads and locks up to $3 due rows of topic $2 at $1 as Claim picks them,
	// returning attempts + 1 already, and ClaimMark(n) leases the n rows whose
	// ids are $3…$n+2: attempts + 1, available_at = $1, leased_by = $2. Both run
	// in one READ COMMITTED transaction. Set both or neither.
	ClaimLock string
	ClaimMark func(n int) string

	// Retire returns the statement that finishes the n held rows named by
	// (id, attempts) pairs $3,$4 … $2n+1,$2n+2: finished_at = $1, outcome = $2,
	// leased_by = ''. Rows no longer held are left alone.
	Retire func(n int) string
	// RetireArrays is Retire with the pairs as two arrays: $3 ids (bigint[]),
	// $4 attempts (integer[]), used instead of it where the database takes
	// arrays.
	RetireArrays string
	// Nak puts held row ($3, $4) back: available_at = $1, leased_by = '',
	// last_error = $2.
	Nak string
	// Extend returns the statement that sets available_at = $1 of the n held
	// rows named by pairs $2,$3 … (a lease's renewal).
	Extend func(n int) string
	// ExtendArrays is Extend with $2 ids (bigint[]) and $3 attempts
	// (integer[]).
	ExtendArrays string
	// Finish finishes held row ($4, $5) with a reason: finished_at = $1,
	// outcome = $2, last_error = $3, leased_by = ''.
	Finish string

	// Cancel finishes the unfinished row of topic $3 and msg_id $4, held or
	// not: finished_at = $1, outcome 'cancelled', last_error = $2, leased_by =
	// ''. It affects no row when there is none.
	Cancel string
	// Sweep deletes up to $2 rows finished before $1.
	Sweep string
	// Lag counts the unfinished rows of topic $1.
	Lag string

	// Status returns, per topic with unfinished rows, by topic: topic, the count
	// of those due at $1 (ready), of those held (leased_by <> '' and available_at
	// > $1: running), of those backing off after a failure (leased_by = '',
	// attempts > 0, available_at > $1: retrying), of those waiting for their
	// run-at (attempts = 0, available_at > $1: scheduled), and the oldest
	// created_at of the ready ones (NULL when none).
	Status string
	// Every listing returns, per row: id, msg_id, topic, ordering_key,
	// attempts, created_at, available_at, leased_by, last_error, finished_at
	// (NULL while unfinished), outcome ('' while unfinished).

	// ListUnfinished reads up to $3 unfinished rows with ids above $2, by id, of
	// topic $1 ('' for every topic).
	ListUnfinished string
	// ListFinished reads up to $3 finished rows with ids below $2, newest id
	// first, of topic $1 ('' for every topic).
	ListFinished string

	// PeriodicEnsure writes schedule $1's row with last_tick 0 unless it exists.
	PeriodicEnsure string
	// PeriodicAdvance sets last_tick = $1 of schedule $2 when its last_tick is
	// below $1: one row affected for exactly one of the processes that try a
	// tick, in the transaction that enqueues the tick's message.
	PeriodicAdvance string
}
