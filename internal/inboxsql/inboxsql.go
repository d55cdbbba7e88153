// Package inboxsql holds the statements of idemsql's inbox family whose text the
// drivers of this module (idempg, idemsqlite, idemmysql) share: Inbox returns
// them, given the two clauses in which the databases differ (the lock of a read
// row, and the insert-or-update of an operator row), and OnConflict is the whole
// family of the databases that speak ON CONFLICT and RETURNING (PostgreSQL,
// SQLite). MySQL's driver adds its own statements to Inbox's.
package inboxsql

import (
	"strconv"
	"strings"

	"github.com/idemhq/idem/idemsql"
)

// selectDeadLetter reads dead letters with their operator state, in the columns
// of idemsql.InboxSQL; a WHERE follows it.
const selectDeadLetter = `SELECT d.id, d.consumer, d.msg_id, d.topic, d.position, d.headers, d.payload, d.kind,
	d.reason, d.attempts, d.first_at, d.dead_at, d.replayed_at, o.replay_requested_at, COALESCE(o.replay_reason, ''),
	COALESCE(o.replay_attempts, 0), COALESCE(o.last_replay_error, ''), COALESCE(o.replay_note, ''),
	o.discarded_at, COALESCE(o.discard_reason, '')
	FROM idem_dead_letters d LEFT JOIN idem_dead_letters_ops o ON o.id = d.id `

// InsertDeadLetter is idemsql.InboxSQL.InsertDeadLetter without the clause that
// skips a second pending letter of one message id, which the driver appends.
const InsertDeadLetter = `INSERT INTO idem_dead_letters
	(consumer, msg_id, topic, position, headers, payload, kind, reason, attempts, first_at, dead_at)
	VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)`

// Inbox returns the statements the drivers share. lock is the clause that locks
// a row read until its transaction ends (" FOR UPDATE"), "" on a database whose
// transaction holds its write lock from BEGIN; upsert returns the clause of an
// insert into idem_dead_letters_ops that, when the letter's row exists, sets cols
// to the inserted values instead (more assignments may follow it). It leaves
// InsertDeadLetter and the LSN writes to the driver.
func Inbox(lock string, upsert func(cols ...string) string) idemsql.InboxSQL {
	return idemsql.InboxSQL{
		DeadLetter:      selectDeadLetter + "WHERE d.id = $1",
		OpenDeadLetters: selectDeadLetter + "WHERE d.consumer = $1 AND d.replayed_at IS NULL ORDER BY d.id LIMIT $2",
		// The LIMIT inside bounds the rows read: a consumer with a million open
		// letters costs the poll no more than the bound.
		CountOpenDeadLetters: `SELECT COUNT(*) FROM (SELECT 1 FROM idem_dead_letters
			WHERE consumer = $1 AND replayed_at IS NULL LIMIT $2) AS open_letters`,
		OpenDeadLetter:      selectDeadLetter + "WHERE d.id = $1 AND d.consumer = $2 AND d.replayed_at IS NULL",
		RequestedDeadLetter: selectDeadLetter + "WHERE d.id = $1 AND d.consumer = $2 AND d.replayed_at IS NULL AND o.replay_requested_at IS NOT NULL",
		ListDeadLetters:     listDeadLetters,

		LockDeadLetter:      "SELECT consumer, replayed_at FROM idem_dead_letters WHERE id = $1" + lock,
		CloseDeadLetter:     "UPDATE idem_dead_letters SET replayed_at = $1 WHERE id = $2",
		CloseOpenDeadLetter: "UPDATE idem_dead_letters SET replayed_at = $1 WHERE id = $2 AND replayed_at IS NULL",

		RequestReplay: `INSERT INTO idem_dead_letters_ops (id, consumer, replay_requested_at, replay_reason) VALUES ($1, $2, $3, $4)` +
			upsert("replay_requested_at", "replay_reason") + `, replay_attempts = 0, last_replay_error = ''`,
		DiscardDeadLetter: `INSERT INTO idem_dead_letters_ops (id, consumer, discarded_at, discard_reason) VALUES ($1, $2, $3, $4)` +
			upsert("discarded_at", "discard_reason") + `, replay_requested_at = NULL`,
		NoteReplay: `INSERT INTO idem_dead_letters_ops (id, consumer, replay_note) VALUES ($1, $2, $3)` +
			upsert("replay_note") + `, replay_requested_at = NULL`,
		RequestedReplays: `SELECT o.id, o.replay_attempts FROM idem_dead_letters_ops o JOIN idem_dead_letters d ON d.id = o.id
			WHERE o.consumer = $1 AND o.replay_requested_at IS NOT NULL AND d.replayed_at IS NULL ORDER BY o.id LIMIT $2`,
		ReplayFailed: `UPDATE idem_dead_letters_ops SET replay_attempts = replay_attempts + 1, last_replay_error = $1
			WHERE id = $2 AND replay_requested_at IS NOT NULL`,
		ReplayGaveUp: `UPDATE idem_dead_letters_ops SET replay_attempts = replay_attempts + 1, last_replay_error = $1,
			replay_requested_at = NULL WHERE id = $2 AND replay_requested_at IS NOT NULL`,

		LSNWatermark: `SELECT epoch, next FROM idem_sequences WHERE scope = $1 AND producer = $2`,

		DeadLettered: deadLettered,
	}
}

// OnConflict returns the whole family for a database that speaks ON CONFLICT and
// RETURNING (PostgreSQL, SQLite), with lock as Inbox takes it.
func OnConflict(lock string) idemsql.InboxSQL {
	s := Inbox(lock, func(cols ...string) string { return " ON CONFLICT (id) DO UPDATE SET " + Assign(cols, "excluded.%s") })
	s.InsertDeadLetter = InsertDeadLetter + ` ON CONFLICT (consumer, msg_id) WHERE replayed_at IS NULL AND msg_id <> '' DO NOTHING`
	// One statement that locks the source's row: a row returned means the
	// watermark moved.
	s.LSNAdvance = `INSERT INTO idem_sequences (scope, producer, epoch, next, bits) VALUES ($1, $2, $3, $4, NULL)
		ON CONFLICT (scope, producer) DO UPDATE SET epoch = excluded.epoch, next = excluded.next
		WHERE idem_sequences.epoch < excluded.epoch OR (idem_sequences.epoch = excluded.epoch AND idem_sequences.next < excluded.next)
		RETURNING 1`
	return s
}

// Assign returns "c = value, …" for each column c of cols, value being form with
// %s replaced by c: the assignments of an upsert clause.
func Assign(cols []string, form string) string {
	set := make([]string, len(cols))
	for i, c := range cols {
		set[i] = c + " = " + strings.ReplaceAll(form, "%s", c)
	}
	return strings.Join(set, ", ")
}

// deadLettered reads which of n message ids ($2..$n+1) consumer $1
// dead-lettered, from idem_dead_letters_msg (consumer, msg_id): n probes.
func deadLettered(n int) string {
	var b strings.Builder
	b.WriteString("SELECT msg_id, MIN(dead_at) FROM idem_dead_letters WHERE consumer = $1 AND msg_id IN (")
	for i := range n {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString("$" + strconv.Itoa(i+2))
	}
	b.WriteString(") GROUP BY msg_id")
	return b.String()
}

// listDeadLetters is idemsql.InboxSQL.ListDeadLetters in SQL that PostgreSQL,
// SQLite and MySQL accept.
func listDeadLetters(c idemsql.DeadLetterConds) string {
	var where []string
	n := 0
	add := func(set bool, cond string) {
		if set {
			n++
			where = append(where, strings.ReplaceAll(cond, "$?", "$"+strconv.Itoa(n)))
		}
	}
	add(c.Consumer, "d.consumer = $?")
	add(c.Kind, "d.kind = $?")
	add(c.Reason, "LOWER(d.reason) LIKE $? ESCAPE '!'")
	add(c.Since, "d.dead_at >= $?")
	add(c.Until, "d.dead_at < $?")
	add(true, "d.id > $?")
	if !c.IncludeDone {
		where = append(where, "d.replayed_at IS NULL")
	}
	return selectDeadLetter + "WHERE " + strings.Join(where, " AND ") + " ORDER BY d.id LIMIT $" + strconv.Itoa(n+1)
}
