package outbox

import "strconv"

// The statements of a relay's rounds: which rows are due, and how a round takes
// its partitions and reads their rows on each database.

// A row is due when it is pending, not waiting out a backoff, and no earlier row of
// its ordering key is waiting out one (which would let it overtake). Only rows that
// failed before can be backing off (attempts > 0): the relay alone sets a future
// available_at, so that of a row it never tried is not read, and a producer whose
// clock is ahead, or who wrote microseconds, does not hold its row back. The partial
// index idem_outbox_failing holds just the rows with attempts, so the check costs a
// probe of a nearly empty index.
const dueSQL = `FROM idem_outbox o
WHERE o.published_at IS NULL AND o.parked_at IS NULL AND ` + notBackingOff + `
  AND (o.ordering_key = '' OR NOT EXISTS (SELECT 1 FROM idem_outbox e
       WHERE e.ordering_key = o.ordering_key AND e.id < o.id AND e.attempts > 0
         AND e.published_at IS NULL AND e.parked_at IS NULL AND e.available_at > $1))`

// On PostgreSQL a round first locks some ordering partitions that have due rows, at
// random so that relays spread over them, and only then reads rows of the partitions
// it holds: a row is read only when no other relay can publish its partition, and the
// earliest pending row of each held partition is visible to the read. (Locking the
// partition row by row inside one scan would not do: a scan that skipped a partition
// held by a relay that then rolled back could take the partition's later rows.)
//
// The partitions with due rows are found by skipping through idem_outbox_part in
// partition order, one LIMIT 1 read per partition: at most 64 index probes whatever
// the backlog. (An EXISTS per partition let the planner hash every pending row each
// round, or walk idem_outbox_pending, dead entries of just-published rows included,
// once per partition.) OFFSET 0 keeps the lock out of the random ordering, so only
// the partitions returned are locked: pushed below the sort, it locked them all.
var lockPartitionsSQL = `WITH RECURSIVE due AS (
	(SELECT o.part FROM idem_outbox o
	WHERE o.published_at IS NULL AND o.parked_at IS NULL AND ` + notBackingOff + ` ORDER BY o.part LIMIT 1)
	UNION ALL
	SELECT (SELECT o.part FROM idem_outbox o WHERE o.part > due.part
		AND o.published_at IS NULL AND o.parked_at IS NULL AND ` + notBackingOff + ` ORDER BY o.part LIMIT 1)
	FROM due WHERE due.part IS NOT NULL)
SELECT part FROM (SELECT part FROM due WHERE part IS NOT NULL ORDER BY random() OFFSET 0) s
WHERE pg_try_advisory_xact_lock(hashtext('idem_outbox:' || current_schema()), part) LIMIT $2`

// notBackingOff holds for a row that never failed, or whose backoff ended by $1.
const notBackingOff = `(o.attempts = 0 OR o.available_at <= $1)`

var (
	// claimPostgres reads without FOR UPDATE: the partition locks already keep
	// other relays off these rows, nothing else writes a pending row that is not
	// parked (Admin's Retry and Discard take parked rows, cleanup published ones),
	// and the read's snapshot, taken after the locks, sees every mark of the
	// partitions' previous holders. A row lock would write each row (and WAL)
	// once more before the mark.
	claimPostgres = selectCols + dueSQL + `
  AND o.part = ANY($3::int[]) AND o.id > $4
ORDER BY o.id LIMIT $2`
	claimSQLite = selectCols + dueSQL + `
ORDER BY o.id LIMIT $2`
	claimMySQL = selectCols + dueSQL + `
  AND o.part = $3
ORDER BY o.id LIMIT $2 FOR UPDATE`
	// claimStraysMySQL reads the due rows whose part is out of range, which no row
	// of idem_outbox_parts covers: written by hand, they fail to decode and are
	// parked, where without this read they would wait unseen forever. Nothing
	// orders them, so two relays skip each other's.
	claimStraysMySQL = selectCols + dueSQL + `
  AND (o.part < 0 OR o.part > ` + partitionsMax + `)
ORDER BY o.id LIMIT $2 FOR UPDATE SKIP LOCKED`
)

var (
	// duePartsMySQL lists the partitions with pending rows, one index probe each
	// (the LIMIT keeps MySQL from reading every pending row to answer); some may be
	// backing off, which the claim then skips. It also returns strayPart when a
	// pending row's part is out of range. lockPartsMySQL locks some of them, in the
	// index's order, so that it locks only the rows it returns.
	duePartsMySQL = `SELECT p.part FROM idem_outbox_parts p WHERE (SELECT 1 FROM idem_outbox o
		WHERE o.published_at IS NULL AND o.parked_at IS NULL AND o.part = p.part LIMIT 1) IS NOT NULL
	UNION ALL SELECT -1 FROM (SELECT 1 FROM idem_outbox o WHERE o.published_at IS NULL AND o.parked_at IS NULL
		AND (o.part < 0 OR o.part > ` + partitionsMax + `) LIMIT 1) s`
	lockPartsMySQL = `SELECT part FROM idem_outbox_parts WHERE part IN (%s) ORDER BY part LIMIT %d FOR UPDATE SKIP LOCKED`
)

// strayPart stands, among a MySQL round's partitions, for the rows whose part is
// out of range (claimStraysMySQL).
const strayPart = -1

// The partition locks are keyed by the schema too, so outboxes in two schemas of one
// database do not hold each other back.
//
// partitionsPerRound is how many ordering partitions a PostgreSQL relay takes per
// round: a quarter, so up to four relays work side by side on a backlog.
const partitionsPerRound = Partitions / 4

// partitionsMax is the highest partition number, as SQL text.
var partitionsMax = strconv.Itoa(Partitions - 1)
