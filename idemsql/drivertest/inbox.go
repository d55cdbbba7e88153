package drivertest

import (
	"database/sql"
	"fmt"
	"reflect"
	"slices"
	"testing"

	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/migrate"
)

// Inbox checks the driver's InboxSQL (package inbox's dead letters, their
// operator state and replays, and LSN watermarks) against a database db opens
// for the test, fresh and empty: each statement does what its field's comment
// says, and a failure names the field.
func Inbox(t *testing.T, db func(t *testing.T) idemsql.TxDB[*sql.Tx]) {
	t.Run("DeadLetters", func(t *testing.T) {
		t.Parallel()
		r := newInboxRunner(t, db)
		ids := r.insertLetters()
		r.readLetters(ids)
		r.locks(ids)
		r.replays(ids)
		r.closing(ids)
		r.list(ids)
	})
	t.Run("DeadLettered", func(t *testing.T) {
		t.Parallel()
		newInboxRunner(t, db).deadLettered()
	})
	t.Run("LSN", func(t *testing.T) {
		t.Parallel()
		r := newInboxRunner(t, db)
		r.lsn()
	})
}

type inboxRunner struct {
	stmtRunner
	s *idemsql.InboxSQL
}

func newInboxRunner(t *testing.T, db func(t *testing.T) idemsql.TxDB[*sql.Tx]) inboxRunner {
	r := newStmtRunner(t, db, "InboxSQL", migrate.Inbox, migrate.Sequences)
	return inboxRunner{stmtRunner: r, s: r.db.Driver.Inbox()}
}

// letter is a row of a read of dead letters, in the columns InboxSQL documents.
type letter struct {
	id                               int64
	consumer, msgID, topic, position string
	headers                          string
	payload                          []byte
	kind, reason                     string
	attempts                         int
	firstAt, deadAt                  int64
	replayedAt, requestedAt          *int64
	replayReason                     string
	replayAttempts                   int
	lastReplayError, replayNote      string
	discardedAt                      *int64
	discardReason                    string
}

func scanLetter(row idemsql.Row) (l letter, err error) {
	err = row.Scan(&l.id, &l.consumer, &l.msgID, &l.topic, &l.position, &l.headers, &l.payload, &l.kind, &l.reason,
		&l.attempts, &l.firstAt, &l.deadAt, &l.replayedAt, &l.requestedAt, &l.replayReason, &l.replayAttempts,
		&l.lastReplayError, &l.replayNote, &l.discardedAt, &l.discardReason)
	return l, err
}

// letters runs field's read of dead letters and returns its rows.
func (r inboxRunner) letters(field, stmt string, args ...any) []letter {
	r.t.Helper()
	var out []letter
	r.rows(field, stmt, args, func(rows idemsql.Rows) error {
		l, err := scanLetter(rows)
		out = append(out, l)
		return err
	})
	return out
}

// letter returns dead letter id as DeadLetter reads it.
func (r inboxRunner) letter(id int64) letter {
	r.t.Helper()
	ls := r.letters("DeadLetter", r.s.DeadLetter, id)
	if len(ls) != 1 {
		r.fatal("DeadLetter", "read %d rows for dead letter %d, want 1", len(ls), id)
	}
	return ls[0]
}

func letterIDs(ls []letter) []int64 {
	out := make([]int64, len(ls))
	for i, l := range ls {
		out[i] = l.id
	}
	return out
}

// The letters the checks write: c1 has four (two without a message id), c2 one.
const (
	l1 = iota
	l2
	l3
	l4
	l5
)

// insertLetters writes the five letters, and a redelivery of the first, and
// returns their ids.
func (r inboxRunner) insertLetters() []int64 {
	ins := func(consumer, msgID, kind, reason string, deadAt int64) {
		r.exec("InsertDeadLetter", r.s.InsertDeadLetter, consumer, msgID, "orders", "p-"+msgID, `{"h":"v"}`,
			[]byte("payload"), kind, reason, 3, int64(1000), deadAt)
	}
	ins("c1", "m1", "permanent", "Failed at 50% of the_batch", 2000)
	ins("c1", "m1", "permanent", "Failed again", 2500) // a redelivery: skipped
	ins("c1", "", "no_key", "no key", 3000)
	ins("c1", "", "no_key", "no key", 4000) // no message id: never a duplicate
	ins("c1", "m4", "max_attempts", "failed at 50x of thexbatch", 5000)
	ins("c2", "m1", "permanent", "another consumer", 6000)
	ids := letterIDs(r.letters("OpenDeadLetters", r.s.OpenDeadLetters, "c1", 10))
	if len(ids) != 4 || !slices.IsSorted(ids) {
		r.fatal("InsertDeadLetter", "consumer c1 has open letters %v, want 4 in id order (a second pending letter of one message id skipped, letters without one kept)", ids)
	}
	if got := letterIDs(r.letters("OpenDeadLetters", r.s.OpenDeadLetters, "c1", 2)); !slices.Equal(got, ids[:2]) {
		r.errorf("OpenDeadLetters", "with limit 2 read %v, want %v", got, ids[:2])
	}
	c2 := letterIDs(r.letters("OpenDeadLetters", r.s.OpenDeadLetters, "c2", 10))
	if len(c2) != 1 {
		r.fatal("OpenDeadLetters", "consumer c2 has open letters %v, want 1", c2)
	}
	r.count("c1", 10, 4)
	r.count("c1", 3, 3)
	r.count("c2", 10, 1)
	r.count("c3", 10, 0)
	return append(ids, c2[0])
}

// count checks that CountOpenDeadLetters counts want open letters of consumer,
// counting up to limit.
func (r inboxRunner) count(consumer string, limit, want int64) {
	r.t.Helper()
	r.need("CountOpenDeadLetters", r.s.CountOpenDeadLetters)
	var n int64
	if !r.row("CountOpenDeadLetters", r.s.CountOpenDeadLetters, []any{consumer, limit}, &n) || n != want {
		r.errorf("CountOpenDeadLetters", "counted %d open letters of %s (up to %d), want %d", n, consumer, limit, want)
	}
}

// readLetters checks the reads of one letter.
func (r inboxRunner) readLetters(ids []int64) {
	got := r.letter(ids[l1])
	want := letter{id: ids[l1], consumer: "c1", msgID: "m1", topic: "orders", position: "p-m1", headers: `{"h":"v"}`,
		payload: []byte("payload"), kind: "permanent", reason: "Failed at 50% of the_batch", attempts: 3, firstAt: 1000, deadAt: 2000}
	if !sameLetter(got, want) {
		r.errorf("DeadLetter", "read %v, want %v (columns in InboxSQL's order; without an operator row, empty text, 0 and NULL)", got, want)
	}
	if ls := r.letters("DeadLetter", r.s.DeadLetter, ids[l5]+1000); len(ls) != 0 {
		r.errorf("DeadLetter", "read %d rows for an unknown id", len(ls))
	}
	if ls := r.letters("OpenDeadLetter", r.s.OpenDeadLetter, ids[l1], "c1"); len(ls) != 1 || ls[0].id != ids[l1] {
		r.errorf("OpenDeadLetter", "read %v for an open letter of its consumer, want it", letterIDs(ls))
	}
	if ls := r.letters("OpenDeadLetter", r.s.OpenDeadLetter, ids[l1], "c2"); len(ls) != 0 {
		r.errorf("OpenDeadLetter", "read a letter of another consumer")
	}
	if ls := r.letters("RequestedDeadLetter", r.s.RequestedDeadLetter, ids[l1], "c1"); len(ls) != 0 {
		r.errorf("RequestedDeadLetter", "read a letter whose replay nobody requested")
	}
}

func sameLetter(a, b letter) bool { return reflect.DeepEqual(a, b) }

// String shows l with its NULLs, not their addresses.
func (l letter) String() string {
	return fmt.Sprintf("{id %d, consumer %q, msg_id %q, topic %q, position %q, headers %q, payload %q, kind %q, reason %q, "+
		"attempts %d, first_at %d, dead_at %d, replayed_at %v, replay_requested_at %v, replay_reason %q, replay_attempts %d, "+
		"last_replay_error %q, replay_note %q, discarded_at %v, discard_reason %q}",
		l.id, l.consumer, l.msgID, l.topic, l.position, l.headers, l.payload, l.kind, l.reason, l.attempts, l.firstAt, l.deadAt,
		deref(l.replayedAt), deref(l.requestedAt), l.replayReason, l.replayAttempts, l.lastReplayError, l.replayNote,
		deref(l.discardedAt), l.discardReason)
}

// replays checks the statements of requested replays on letters 1 to 3.
func (r inboxRunner) replays(ids []int64) {
	r.exec("RequestReplay", r.s.RequestReplay, ids[l1], "c1", int64(7000), "why")
	r.checkOps("RequestReplay", ids[l1], ptr(7000), "why", 0, "")
	if ls := r.letters("RequestedDeadLetter", r.s.RequestedDeadLetter, ids[l1], "c1"); len(ls) != 1 {
		r.errorf("RequestedDeadLetter", "read %d rows for a requested letter, want 1", len(ls))
	}
	r.requested(10, ids[l1])
	if n := r.exec("ReplayFailed", r.s.ReplayFailed, "boom", ids[l1]); n != 1 {
		r.errorf("ReplayFailed", "affected %d rows of a requested replay, want 1", n)
	}
	r.checkOps("ReplayFailed", ids[l1], ptr(7000), "why", 1, "boom")
	r.exec("RequestReplay", r.s.RequestReplay, ids[l1], "c1", int64(8000), "again")
	r.checkOps("RequestReplay", ids[l1], ptr(8000), "again", 0, "")
	r.exec("ReplayFailed", r.s.ReplayFailed, "boom", ids[l1])
	r.exec("ReplayGaveUp", r.s.ReplayGaveUp, "gave up: boom", ids[l1])
	r.checkOps("ReplayGaveUp", ids[l1], nil, "again", 2, "gave up: boom")
	if n := r.exec("ReplayFailed", r.s.ReplayFailed, "late", ids[l1]); n != 0 {
		r.errorf("ReplayFailed", "affected %d rows of a withdrawn request, want 0", n)
	}
	r.requested(10)
	r.exec("RequestReplay", r.s.RequestReplay, ids[l3], "c1", int64(7000), "")
	r.exec("RequestReplay", r.s.RequestReplay, ids[l2], "c1", int64(7000), "")
	r.requested(1, ids[l2])
	if n := r.exec("CloseOpenDeadLetter", r.s.CloseOpenDeadLetter, int64(9000), ids[l2]); n != 1 {
		r.errorf("CloseOpenDeadLetter", "affected %d rows of an open letter, want 1", n)
	}
	if n := r.exec("CloseOpenDeadLetter", r.s.CloseOpenDeadLetter, int64(9100), ids[l2]); n != 0 {
		r.errorf("CloseOpenDeadLetter", "affected %d rows of a closed letter, want 0", n)
	}
	r.requested(10, ids[l3])
	if ls := r.letters("OpenDeadLetter", r.s.OpenDeadLetter, ids[l2], "c1"); len(ls) != 0 {
		r.errorf("OpenDeadLetter", "read a closed letter")
	}
	r.exec("NoteReplay", r.s.NoteReplay, ids[l2], "c1", "applied")
	if l := r.letter(ids[l2]); l.replayNote != "applied" || l.requestedAt != nil || l.replayedAt == nil || *l.replayedAt != 9000 {
		r.errorf("NoteReplay", "left note %q, request %v, replayed_at %v; want applied, NULL (cleared), 9000", l.replayNote, l.requestedAt, l.replayedAt)
	}
	r.exec("NoteReplay", r.s.NoteReplay, ids[l4], "c1", "already applied") // no operator row yet
	if l := r.letter(ids[l4]); l.replayNote != "already applied" {
		r.errorf("NoteReplay", "wrote note %q on a letter without an operator row, want %q", l.replayNote, "already applied")
	}
}

func ptr(v int64) *int64 { return &v }

// checkOps checks the replay columns of letter id after field's statement.
func (r inboxRunner) checkOps(field string, id int64, requested *int64, reason string, attempts int, lastErr string) {
	r.t.Helper()
	l := r.letter(id)
	if !reflect.DeepEqual(l.requestedAt, requested) || l.replayReason != reason ||
		l.replayAttempts != attempts || l.lastReplayError != lastErr {
		r.errorf(field, "left replay_requested_at %v, replay_reason %q, replay_attempts %d, last_replay_error %q; want %v, %q, %d, %q",
			deref(l.requestedAt), l.replayReason, l.replayAttempts, l.lastReplayError, deref(requested), reason, attempts, lastErr)
	}
}

func deref(p *int64) any {
	if p == nil {
		return "NULL"
	}
	return *p
}

// requested checks that RequestedReplays lists want, up to limit.
func (r inboxRunner) requested(limit int, want ...int64) {
	r.t.Helper()
	var got []int64
	r.rows("RequestedReplays", r.s.RequestedReplays, []any{"c1", limit}, func(rows idemsql.Rows) error {
		var id int64
		var attempts int
		err := rows.Scan(&id, &attempts)
		got = append(got, id)
		return err
	})
	if !slices.Equal(got, want) {
		r.errorf("RequestedReplays", "listed %v (limit %d), want %v: requested, open letters of the consumer in id order", got, limit, want)
	}
}

// locks checks that LockDeadLetter holds the letter's row.
func (r inboxRunner) locks(ids []int64) {
	r.holds("LockDeadLetter", func(q idemsql.Querier) error {
		var consumer string
		var replayed *int64
		return q.QueryRow(r.ctx, r.s.LockDeadLetter, ids[l1]).Scan(&consumer, &replayed)
	})
}

// closing checks the operator's lock and discard.
func (r inboxRunner) closing(ids []int64) {
	var consumer string
	var replayed *int64
	if !r.row("LockDeadLetter", r.s.LockDeadLetter, []any{ids[l1]}, &consumer, &replayed) || consumer != "c1" || replayed != nil {
		r.errorf("LockDeadLetter", "read consumer %q, replayed_at %v of an open letter, want c1, NULL", consumer, deref(replayed))
	}
	if !r.row("LockDeadLetter", r.s.LockDeadLetter, []any{ids[l2]}, &consumer, &replayed) || replayed == nil || *replayed != 9000 {
		r.errorf("LockDeadLetter", "read replayed_at %v of a replayed letter, want 9000", deref(replayed))
	}
	if r.row("LockDeadLetter", r.s.LockDeadLetter, []any{ids[l5] + 1000}, &consumer, &replayed) {
		r.errorf("LockDeadLetter", "read a row for an unknown id")
	}
	for _, ix := range []int{l3, l5} { // l3 has a requested replay, l5 no operator row
		id, consumer := ids[ix], map[int]string{l3: "c1", l5: "c2"}[ix]
		if n := r.exec("CloseDeadLetter", r.s.CloseDeadLetter, int64(9500), id); n != 1 {
			r.errorf("CloseDeadLetter", "affected %d rows, want 1", n)
		}
		r.exec("DiscardDeadLetter", r.s.DiscardDeadLetter, id, consumer, int64(9500), "spam")
		l := r.letter(id)
		if l.discardedAt == nil || *l.discardedAt != 9500 || l.discardReason != "spam" || l.requestedAt != nil || l.replayedAt == nil {
			r.errorf("DiscardDeadLetter", "left discarded_at %v, discard_reason %q, replay_requested_at %v, replayed_at %v; want 9500, spam, NULL, 9500",
				deref(l.discardedAt), l.discardReason, deref(l.requestedAt), deref(l.replayedAt))
		}
	}
}

// list checks ListDeadLetters. By now letters 1 and 4 are open, 2, 3 and 5 closed.
func (r inboxRunner) list(ids []int64) {
	r.count("c1", 10, 2) // closed letters are not counted
	r.count("c2", 10, 0)
	type C = idemsql.DeadLetterConds
	all := func(ix ...int) []int64 {
		out := make([]int64, len(ix))
		for i, x := range ix {
			out[i] = ids[x]
		}
		return out
	}
	for _, tc := range []struct {
		c    C
		args []any
		want []int64
	}{
		{C{}, []any{0, 100}, all(l1, l4)},
		{C{IncludeDone: true}, []any{0, 100}, all(l1, l2, l3, l4, l5)},
		{C{IncludeDone: true}, []any{ids[l1], 1}, all(l2)},
		{C{Consumer: true, IncludeDone: true}, []any{"c1", 0, 100}, all(l1, l2, l3, l4)},
		{C{Consumer: true, Kind: true, IncludeDone: true}, []any{"c1", "permanent", 0, 100}, all(l1)},
		{C{Kind: true, IncludeDone: true}, []any{"no_key", 0, 100}, all(l2, l3)},
		{C{Reason: true}, []any{"%failed at 50!%%", 0, 100}, all(l1)},
		{C{Reason: true}, []any{"%the!_batch%", 0, 100}, all(l1)},
		{C{Since: true, Until: true, IncludeDone: true}, []any{int64(3000), int64(5000), 0, 100}, all(l2, l3)},
		{C{Consumer: true, Since: true}, []any{"c1", int64(2000), 0, 100}, all(l1, l4)},
	} {
		if got := letterIDs(r.letters("ListDeadLetters", r.s.ListDeadLetters(tc.c), tc.args...)); !slices.Equal(got, tc.want) {
			r.errorf("ListDeadLetters", "%+v with args %v listed %v, want %v", tc.c, tc.args, got, tc.want)
		}
	}
}

// lsn checks the statements of LSN watermarks.
func (r inboxRunner) lsn() {
	var e, n int64
	if r.row("LSNWatermark", r.s.LSNWatermark, []any{"lsn", "src"}, &e, &n) {
		r.errorf("LSNWatermark", "read a row of a source never checked")
	}
	steps := []struct {
		epoch, next int64
		moved       bool
	}{{5, 3, true}, {5, 3, false}, {5, 2, false}, {4, 9, false}, {5, 4, true}, {6, 1, true}}
	for _, st := range steps {
		if moved := r.advance(st.epoch, st.next); moved != st.moved {
			field := "LSNAdvance"
			if r.s.LSNAdvance == "" {
				field = "LSNLock"
			}
			r.errorf(field, "to {%d, %d} moved the watermark: %v, want %v", st.epoch, st.next, moved, st.moved)
		}
	}
	if !r.row("LSNWatermark", r.s.LSNWatermark, []any{"lsn", "src"}, &e, &n) || e != 6 || n != 1 {
		r.errorf("LSNWatermark", "read {%d, %d}, want {6, 1}", e, n)
	}
}

// advance moves the watermark of source "src" to {epoch, next} as
// inbox.LSNTracker does, and reports whether it moved.
func (r inboxRunner) advance(epoch, next int64) (moved bool) {
	r.t.Helper()
	if r.s.LSNAdvance != "" {
		var one int
		return r.row("LSNAdvance", r.s.LSNAdvance, []any{"lsn", "src", epoch, next}, &one)
	}
	r.need("LSNEnsure", r.s.LSNEnsure)
	r.need("LSNLock", r.s.LSNLock)
	r.need("LSNSet", r.s.LSNSet)
	r.inTx("LSNEnsure", func(q idemsql.Querier) error {
		_, err := q.Exec(r.ctx, r.s.LSNEnsure, "lsn", "src")
		return err
	})
	r.inTx("LSNLock", func(q idemsql.Querier) error {
		var e, n int64
		if err := q.QueryRow(r.ctx, r.s.LSNLock, "lsn", "src").Scan(&e, &n); err != nil {
			return err
		}
		if moved = e < epoch || (e == epoch && n < next); !moved {
			return nil
		}
		_, err := q.Exec(r.ctx, r.s.LSNSet, "lsn", "src", epoch, next)
		return err
	})
	return moved
}
