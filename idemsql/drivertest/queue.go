package drivertest

import (
	"database/sql"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/migrate"
)

// Queue checks a driver's idemsql.QueueSQL against a real database: enqueue
// (one row a statement, and as arrays where the database takes them) with its
// uniqueness of unfinished rows, the claim (or ClaimLock and ClaimMark) with
// its due-ness and its columns, the fenced settles (Retire, Nak, Extend,
// Finish, and their array forms), Cancel, Sweep, Lag, Status, the listings and
// the periodic schedules' rows. db opens a fresh database for each subtest; the
// queue's migrations are applied to it.
func Queue(t *testing.T, db func(t *testing.T) idemsql.TxDB[*sql.Tx]) {
	for _, c := range []struct {
		name string
		fn   func(q *queueT)
	}{
		{"Insert", (*queueT).insert},
		{"Claim", (*queueT).claims},
		{"Ordering", (*queueT).ordering},
		{"Settle", (*queueT).settles},
		{"Cancel", (*queueT).cancel},
		{"Sweep", (*queueT).sweep},
		{"Status", (*queueT).status},
		{"List", (*queueT).list},
		{"Periodic", (*queueT).periodic},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			r := newStmtRunner(t, db, "QueueSQL", migrate.Queue)
			s := r.db.Driver.Queue()
			if s == nil {
				t.Fatal("the Driver's Queue() is nil")
			}
			c.fn(&queueT{stmtRunner: r, s: s})
		})
	}
}

// queueT is one subtest's database and the driver's statements.
type queueT struct {
	stmtRunner
	s *idemsql.QueueSQL
}

// add writes a message of topic with Insert, available at at, and returns its
// row's id.
func (q *queueT) add(topic, msgID, key string, at int64) int64 {
	q.t.Helper()
	if n := q.exec("Insert", q.s.Insert, msgID, topic, key, `{"h":"v"}`, []byte("p-"+msgID), now, at); n != 1 {
		q.fatal("Insert", "of new message %s affected %d rows, want 1", msgID, n)
	}
	return q.id(topic, msgID)
}

// id is the row id of the unfinished message msgID of topic.
func (q *queueT) id(topic, msgID string) (id int64) {
	q.t.Helper()
	if !q.row("(the test's own read)", "SELECT id FROM idem_queue WHERE topic = $1 AND msg_id = $2 AND finished_at IS NULL",
		[]any{topic, msgID}, &id) {
		q.t.Fatalf("no unfinished row of %s/%s", topic, msgID)
	}
	return id
}

// qstate is a row of idem_queue as the tests check it.
type qstate struct {
	attempts  int
	available int64
	leasedBy  string
	lastError string
	finished  *int64
	outcome   string
}

func (q *queueT) state(id int64) (s qstate) {
	q.t.Helper()
	if !q.row("(the test's own read)", "SELECT attempts, available_at, leased_by, last_error, finished_at, outcome FROM idem_queue WHERE id = $1",
		[]any{id}, &s.attempts, &s.available, &s.leasedBy, &s.lastError, &s.finished, &s.outcome) {
		q.t.Fatalf("no row %d", id)
	}
	return s
}

// qclaimed is a row a claim returned.
type qclaimed struct {
	id         int64
	attempts   int
	created    int64
	msgID, key string
	headers    *string
	headersLen int64
	payload    *[]byte
	payloadLen int64
}

// claim leases up to limit due rows of topic at at, until until, for worker,
// with Claim or with ClaimLock and ClaimMark, and returns them by id.
func (q *queueT) claim(at, until int64, worker, topic string, limit int) []qclaimed {
	q.t.Helper()
	scan := func(out *[]qclaimed) func(r idemsql.Rows) error {
		return func(r idemsql.Rows) error {
			var c qclaimed
			err := r.Scan(&c.id, &c.attempts, &c.created, &c.msgID, &c.key, &c.headers, &c.headersLen, &c.payload, &c.payloadLen)
			*out = append(*out, c)
			return err
		}
	}
	var out []qclaimed
	switch {
	case q.s.ClaimLock != "" || q.s.ClaimMark != nil:
		if q.s.ClaimLock == "" || q.s.ClaimMark == nil || q.s.Claim != "" {
			q.fatal("ClaimLock", "set with ClaimMark %v and Claim %q: set ClaimLock and ClaimMark both, and then no Claim", q.s.ClaimMark != nil, q.s.Claim)
		}
		err := q.db.InTxReadCommitted(q.ctx, func(tx *sql.Tx) error {
			qr := q.db.Querier(tx)
			if err := idemsql.EachRow(q.ctx, qr, q.s.ClaimLock, []any{at, topic, limit}, scan(&out)); err != nil {
				return fmt.Errorf("ClaimLock: %w", err)
			}
			if len(out) == 0 {
				return nil
			}
			args := []any{until, worker}
			for _, c := range out {
				args = append(args, c.id)
			}
			n, err := qr.Exec(q.ctx, q.s.ClaimMark(len(out)), args...)
			if err != nil {
				return fmt.Errorf("ClaimMark(%d): %w", len(out), err)
			}
			if n != int64(len(out)) {
				return fmt.Errorf("ClaimMark(%d) affected %d rows", len(out), n)
			}
			return nil
		})
		if err != nil {
			q.fatal("ClaimLock", "%v", err)
		}
	default:
		q.rows("Claim", q.s.Claim, []any{at, until, worker, topic, limit}, scan(&out))
	}
	slices.SortFunc(out, func(a, b qclaimed) int { return int(a.id - b.id) })
	return out
}

// ids returns the ids of cs.
func ids(cs []qclaimed) []int64 {
	out := make([]int64, len(cs))
	for i, c := range cs {
		out[i] = c.id
	}
	return out
}

// insert: Insert writes a message once while it is unfinished, and again once
// it finished; InsertArrays (and InsertArraysNotify) write a batch in the
// arrays' order, skipping the duplicates of unfinished rows and of earlier
// elements, and return what they wrote.
func (q *queueT) insert() {
	t := q.t
	id := q.add("t", "m1", "k", now)
	if n := q.exec("Insert", q.s.Insert, "m1", "t", "k", "{}", []byte("again"), now, now); n != 0 {
		q.fatal("Insert", "of a message unfinished already affected %d rows, want 0 (a duplicate writes nothing)", n)
	}
	q.add("other-topic", "m1", "", now) // the same id in another topic is another message
	var payload []byte
	var headers string
	q.row("(the test's own read)", "SELECT payload, headers FROM idem_queue WHERE id = $1", []any{id}, &payload, &headers)
	if string(payload) != "p-m1" || headers != `{"h":"v"}` {
		q.fatal("Insert", "wrote payload %q headers %q", payload, headers)
	}
	if s := q.state(id); s.attempts != 0 || s.available != now || s.finished != nil || s.outcome != "" || s.leasedBy != "" {
		q.fatal("Insert", "wrote %+v", s)
	}
	// Once finished, the same message is written again (its consumer's keys drop it).
	q.affects("Finish", 1, "finishing the row", q.s.Finish, now, idemsql.QueueApplied, "", id, 0)
	if n := q.exec("Insert", q.s.Insert, "m1", "t", "k", "{}", []byte("again"), now, now); n != 1 {
		q.fatal("Insert", "of a message whose row finished affected %d rows, want 1", n)
	}
	if q.s.InsertArrays == "" {
		if q.s.InsertArraysNotify != "" {
			q.fatal("InsertArraysNotify", "is set without InsertArrays")
		}
		return
	}
	q.need("InsertArraysNotify", q.s.InsertArraysNotify)
	for _, c := range []struct{ field, stmt string }{{"InsertArrays", q.s.InsertArrays}, {"InsertArraysNotify", q.s.InsertArraysNotify}} {
		p := c.field + "-"
		// m1 of t is unfinished (a duplicate); the second "a" repeats the first.
		var wrote [][2]string
		q.rows(c.field, c.stmt, []any{
			[]string{p + "a", "m1", p + "b", p + "a", p + "c"}, []string{"t", "t", "t", "t", "t"}, []string{"k", "k", "", "", "k"},
			[]string{"{}", "{}", `{"x":"y"}`, "{}", "{}"}, [][]byte{{1}, {2}, {}, {4}, {5}}, []int64{now, now, now + 5, now, now},
			now,
		}, func(r idemsql.Rows) error {
			var w [2]string
			err := r.Scan(&w[0], &w[1])
			wrote = append(wrote, w)
			return err
		})
		slices.SortFunc(wrote, func(a, b [2]string) int { return strings.Compare(a[1], b[1]) })
		if want := [][2]string{{"t", p + "a"}, {"t", p + "b"}, {"t", p + "c"}}; fmt.Sprint(wrote) != fmt.Sprint(want) {
			q.fatal(c.field, "returned %v, want %v: each new row once, no duplicate", wrote, want)
		}
		a, b, cc := q.id("t", p+"a"), q.id("t", p+"b"), q.id("t", p+"c")
		if a >= b || b >= cc {
			q.fatal(c.field, "wrote its rows out of the arrays' order (ids %d, %d, %d)", a, b, cc)
		}
		var payload []byte
		var headers, key string
		var created, avail int64
		q.row("(the test's own read)", "SELECT payload, headers, ordering_key, created_at, available_at FROM idem_queue WHERE id = $1", []any{b},
			&payload, &headers, &key, &created, &avail)
		if len(payload) != 0 || headers != `{"x":"y"}` || key != "" || created != now || avail != now+5 {
			q.fatal(c.field, "wrote payload %v headers %q key %q created %d available %d", payload, headers, key, created, avail)
		}
		q.row("(the test's own read)", "SELECT payload FROM idem_queue WHERE id = $1", []any{a}, &payload)
		if string(payload) != "\x01" {
			q.fatal(c.field, "wrote the first of two equal elements' payload as %v, want [1]", payload)
		}
	}
	if n := q.count("SELECT count(*) FROM idem_queue WHERE topic = 't' AND msg_id = 'm1' AND finished_at IS NULL"); n != 1 {
		t.Fatalf("%d unfinished rows of t/m1, want 1", n)
	}
}

// count runs the test's own count.
func (q *queueT) count(query string, args ...any) (n int64) {
	q.t.Helper()
	q.row("(the test's own read)", query, args, &n)
	return n
}

// claims: a claim leases due rows of its topic, in (available_at, id) order, up
// to its limit, and returns their columns (oversized headers and payloads as
// NULL and their length); it skips rows not yet due (run-at), held (lease not
// expired), finished, and of other topics; a row whose lease expired is claimed
// again with the next attempt.
func (q *queueT) claims() {
	a := q.add("t", "a", "", now-1)
	b := q.add("t", "b", "", now-3)
	c := q.add("t", "c", "", now-2)
	later := q.add("t", "later", "", now+1000) // run-at in the future
	q.add("u", "other", "", now-10)            // another topic
	done := q.add("t", "done", "", now-20)
	q.affects("Finish", 1, "finishing a row", q.s.Finish, now, idemsql.QueueApplied, "", done, 0)

	got := q.claim(now, now+500, "w1", "t", 2)
	if want := []int64{b, c}; fmt.Sprint(ids(got)) != fmt.Sprint(want) {
		q.fatal("Claim", "with limit 2 leased rows %v, want %v (the two of the earliest available_at; not the finished row, not topic u)", ids(got), want)
	}
	for _, g := range got {
		if g.attempts != 1 || g.created != now || g.key != "" || g.headers == nil || *g.headers != `{"h":"v"}` ||
			g.headersLen != int64(len(`{"h":"v"}`)) || g.payload == nil || string(*g.payload) != "p-"+g.msgID || g.payloadLen != int64(len(*g.payload)) {
			q.fatal("Claim", "returned %+v (headers %v, payload %v)", g, orZero(g.headers), orZero(g.payload))
		}
		if s := q.state(g.id); s.attempts != 1 || s.available != now+500 || s.leasedBy != "w1" || s.finished != nil {
			q.fatal("Claim", "left row %d as %+v, want attempts 1, available_at the lease's end, leased_by w1", g.id, s)
		}
	}
	if got[0].msgID != "b" || got[1].msgID != "c" {
		q.fatal("Claim", "returned msg_ids %s, %s, want b, c", got[0].msgID, got[1].msgID)
	}
	// Held rows are skipped; the run-at is honoured.
	if got := q.claim(now, now+1500, "w2", "t", 10); fmt.Sprint(ids(got)) != fmt.Sprint([]int64{a}) {
		q.fatal("Claim", "leased %v, want only %d: rows held until now+500 and a row to run at now+1000 are not due", ids(got), a)
	}
	if got := q.claim(now+999, now+2000, "w2", "t", 10); fmt.Sprint(ids(got)) != fmt.Sprint([]int64{b, c}) {
		q.fatal("Claim", "at now+999 leased %v, want %v (the leases that ran out at now+500; a's runs to now+1500)", ids(got), []int64{b, c})
	}
	got = q.claim(now+1500, now+3000, "w3", "t", 10)
	if fmt.Sprint(ids(got)) != fmt.Sprint([]int64{a, later}) {
		q.fatal("Claim", "at now+1500 leased %v, want %v", ids(got), []int64{a, later})
	}
	if got[0].attempts != 2 || got[1].attempts != 1 {
		q.fatal("Claim", "returned attempts %d and %d, want 2 (claimed again after its lease ran out) and 1", got[0].attempts, got[1].attempts)
	}
	// Oversized headers and payloads come back as NULL and their length.
	big := make([]byte, idem.MaxPayload+1)
	bigHeaders := `{"h":"` + strings.Repeat("x", idemsql.OutboxMaxHeadersBytes) + `"}`
	q.affects("Insert", 1, "a big payload", q.s.Insert, "big", "v", "", "{}", []byte{}, now, now)
	// Grown on the server: MariaDB's default max_allowed_packet refuses such an insert.
	grow := map[idemsql.Dialect]string{
		idemsql.Postgres: `UPDATE idem_queue SET payload = decode(repeat('x', $1), 'escape') WHERE msg_id = 'big'`,
		idemsql.MySQL:    `UPDATE idem_queue SET payload = REPEAT('x', $1) WHERE msg_id = 'big'`,
		idemsql.SQLite:   `UPDATE idem_queue SET payload = zeroblob($1) WHERE msg_id = 'big'`,
	}[q.db.Dialect()]
	if grow == "" {
		q.t.Skipf("no statement to grow a payload on %v", q.db.Dialect())
	}
	q.affects("(the test's own write)", 1, "growing a payload", grow, len(big))
	q.affects("Insert", 1, "big headers", q.s.Insert, "bighdr", "v", "", bigHeaders, []byte("x"), now, now)
	got = q.claim(now, now+10, "w", "v", 10)
	if len(got) != 2 {
		q.fatal("Claim", "leased %d rows of topic v, want 2", len(got))
	}
	if g := got[0]; g.msgID != "big" || g.payload != nil || g.payloadLen != int64(len(big)) || g.headers == nil || *g.headers != "{}" {
		q.fatal("Claim", "returned a payload of %d bytes as %d bytes with length %d, want NULL and its length (headers %v)", len(big), len(orZero(g.payload)), g.payloadLen, orZero(g.headers))
	}
	if g := got[1]; g.msgID != "bighdr" || g.headers != nil || g.headersLen != int64(len(bigHeaders)) || g.payload == nil || string(*g.payload) != "x" {
		q.fatal("Claim", "returned headers of %d bytes as %d bytes with length %d, want NULL and its length", len(bigHeaders), len(orZero(g.headers)), g.headersLen)
	}
}

func orZero[T any](p *T) (v T) {
	if p != nil {
		v = *p
	}
	return v
}

// ordering: a row of an ordering key is due only when no unfinished row of its
// topic and key has a lower id (held, backing off, or scheduled); the empty key
// never blocks; another topic's rows of the same key do not block.
func (q *queueT) ordering() {
	k1 := q.add("t", "k1", "key", now)
	k2 := q.add("t", "k2", "key", now-5) // due earlier, but behind k1
	e1 := q.add("t", "e1", "", now)
	e2 := q.add("t", "e2", "", now)
	q.add("u", "u1", "key", now) // another topic's key
	u2 := q.add("u", "u2", "other", now)
	if got := q.claim(now, now+100, "w", "t", 10); fmt.Sprint(ids(got)) != fmt.Sprint([]int64{k1, e1, e2}) {
		q.fatal("Claim", "leased %v, want %v: k2 waits behind k1, rows without a key never wait", ids(got), []int64{k1, e1, e2})
	}
	if got := q.claim(now+200, now+300, "w", "t", 10); fmt.Sprint(ids(got)) != fmt.Sprint([]int64{k1, e1, e2}) {
		q.fatal("Claim", "after the leases ran out leased %v, want %v: k2 still waits behind unfinished k1", ids(got), []int64{k1, e1, e2})
	}
	// k1 backing off after a Nak still blocks k2.
	q.affects("Nak", 1, "k1 held by attempt 2", q.s.Nak, now+1000, "failed", k1, 2)
	if got := q.claim(now+400, now+500, "w", "t", 10); len(got) != 2 || slices.Contains(ids(got), k2) {
		q.fatal("Claim", "leased %v while k1 backs off: k2 must wait behind it", ids(got))
	}
	q.affects("Retire", 1, "k1", q.retire(1), now, idemsql.QueueDead, k1, 2)
	if got := q.claim(now+400, now+500, "w", "t", 10); fmt.Sprint(ids(got)) != fmt.Sprint([]int64{k2}) {
		q.fatal("Claim", "leased %v once k1 finished, want k2 (%d)", ids(got), k2)
	}
	if got := q.claim(now, now+500, "w", "u", 10); len(got) != 2 || got[1].id != u2 {
		q.fatal("Claim", "leased %v of topic u, want both rows: the key is per topic", ids(got))
	}
}

// retire is Retire(n) (RetireArrays is checked apart).
func (q *queueT) retire(n int) string {
	q.t.Helper()
	q.need("Retire", q.s.Retire(n))
	return q.s.Retire(n)
}

// settles: Retire, Nak, Extend and Finish change a held row named by its id and
// the attempts of its claim, and affect nothing with a stale attempts (another
// claim took the row) or once it finished.
func (q *queueT) settles() {
	rows := make([]int64, 6)
	for i := range rows {
		rows[i] = q.add("t", fmt.Sprint("m", i), "", now)
	}
	// Every row claimed twice: attempts 2 is the lease; 1 is stale.
	q.claim(now, now+10, "old", "t", 10)
	if got := q.claim(now+10, now+100, "w", "t", 10); len(got) != len(rows) || got[0].attempts != 2 {
		q.fatal("Claim", "claimed again %d rows (attempts %v), want %d with attempts 2", len(got), got, len(rows))
	}
	r0, r1, r2, r3, r4, r5 := rows[0], rows[1], rows[2], rows[3], rows[4], rows[5]

	// Extend.
	q.affects("Extend", 0, "stale attempts", q.s.Extend(2), now+500, r0, 1, r1, 1)
	q.affects("Extend", 2, "the held rows", q.s.Extend(2), now+500, r0, 2, r1, 2)
	if s := q.state(r0); s.available != now+500 || s.leasedBy != "w" {
		q.fatal("Extend", "left %+v, want available_at now+500, leased_by w", s)
	}
	if q.s.ExtendArrays != "" {
		q.affects("ExtendArrays", 0, "stale attempts", q.s.ExtendArrays, now+600, []int64{r0, r1}, []int32{1, 1})
		q.affects("ExtendArrays", 1, "one held, one stale", q.s.ExtendArrays, now+600, []int64{r0, r1}, []int32{2, 1})
		if a, b := q.state(r0).available, q.state(r1).available; a != now+600 || b != now+500 {
			q.fatal("ExtendArrays", "left available_at %d and %d, want now+600 and now+500", a-now, b-now)
		}
	}

	// Nak.
	q.affects("Nak", 0, "stale attempts", q.s.Nak, now+50, "boom", r2, 1)
	q.affects("Nak", 1, "the held row", q.s.Nak, now+50, "boom", r2, 2)
	if s := q.state(r2); s.available != now+50 || s.leasedBy != "" || s.lastError != "boom" || s.finished != nil || s.attempts != 2 {
		q.fatal("Nak", "left %+v, want available_at now+50, leased_by '', last_error boom, unfinished", s)
	}

	// Finish.
	q.affects("Finish", 0, "stale attempts", q.s.Finish, now+1, idemsql.QueueDead, "why", r3, 1)
	q.affects("Finish", 1, "the held row", q.s.Finish, now+1, idemsql.QueueDead, "why", r3, 2)
	q.affects("Finish", 0, "a finished row", q.s.Finish, now+2, idemsql.QueueAcked, "", r3, 2)
	if s := q.state(r3); s.finished == nil || *s.finished != now+1 || s.outcome != idemsql.QueueDead || s.lastError != "why" || s.leasedBy != "" {
		q.fatal("Finish", "left %+v, want finished now+1, outcome dead, last_error why, leased_by ''", s)
	}

	// Retire.
	q.affects("Retire", 0, "stale attempts", q.retire(2), now+3, idemsql.QueueApplied, r0, 1, r1, 1)
	q.affects("Retire", 1, "one held, one stale", q.retire(2), now+3, idemsql.QueueApplied, r0, 2, r1, 1)
	q.affects("Retire", 0, "a finished row", q.retire(1), now+4, idemsql.QueueDuplicate, r0, 2)
	if s := q.state(r0); s.finished == nil || *s.finished != now+3 || s.outcome != idemsql.QueueApplied || s.leasedBy != "" {
		q.fatal("Retire", "left %+v, want finished now+3, outcome applied, leased_by ''", s)
	}
	if s := q.state(r1); s.finished != nil || s.leasedBy != "w" {
		q.fatal("Retire", "changed row %d with a stale attempts: %+v", r1, s)
	}
	q.affects("Nak", 0, "a finished row", q.s.Nak, now+50, "late", r0, 2)
	q.affects("Extend", 0, "a finished row", q.s.Extend(1), now+900, r0, 2)
	if q.s.RetireArrays != "" {
		q.affects("RetireArrays", 0, "stale attempts", q.s.RetireArrays, now+5, idemsql.QueueDuplicate, []int64{r1, r4}, []int32{1, 1})
		q.affects("RetireArrays", 2, "the held rows", q.s.RetireArrays, now+5, idemsql.QueueDuplicate, []int64{r1, r4}, []int32{2, 2})
		q.affects("RetireArrays", 0, "finished rows", q.s.RetireArrays, now+6, idemsql.QueueApplied, []int64{r1, r4}, []int32{2, 2})
		if s := q.state(r4); s.finished == nil || *s.finished != now+5 || s.outcome != idemsql.QueueDuplicate || s.leasedBy != "" {
			q.fatal("RetireArrays", "left %+v, want finished now+5, outcome duplicate", s)
		}
		if q.s.ExtendArrays == "" {
			q.fatal("ExtendArrays", "is empty while RetireArrays is set")
		}
	}
	// A cancelled row is no longer held.
	q.affects("Cancel", 1, "a held row", q.s.Cancel, now+7, "no more", "t", "m5")
	q.affects("Retire", 0, "a cancelled row", q.retire(1), now+8, idemsql.QueueApplied, r5, 2)
}

// cancel: Cancel finishes the unfinished row of a topic and msg_id, waiting or
// held, as cancelled with its reason; nothing else; and a new copy can then be
// enqueued.
func (q *queueT) cancel() {
	w := q.add("t", "waiting", "", now)
	q.add("u", "waiting", "", now)
	q.affects("Cancel", 1, "a waiting row", q.s.Cancel, now+1, "not needed", "t", "waiting")
	if s := q.state(w); s.finished == nil || *s.finished != now+1 || s.outcome != idemsql.QueueCancelled || s.lastError != "not needed" {
		q.fatal("Cancel", "left %+v, want finished now+1, outcome cancelled, last_error the reason", s)
	}
	q.affects("Cancel", 0, "a cancelled row", q.s.Cancel, now+2, "again", "t", "waiting")
	q.affects("Cancel", 0, "an unknown message", q.s.Cancel, now+2, "?", "t", "nobody")
	if n := q.count("SELECT count(*) FROM idem_queue WHERE topic = 'u' AND finished_at IS NULL"); n != 1 {
		q.fatal("Cancel", "cancelled the message of another topic too")
	}
	h := q.add("t", "held", "", now)
	if got := q.claim(now, now+100, "w", "t", 1); len(got) != 1 || got[0].id != h {
		q.fatal("Claim", "leased %v, want %d", ids(got), h)
	}
	q.affects("Cancel", 1, "a held row", q.s.Cancel, now+3, "stop", "t", "held")
	if s := q.state(h); s.outcome != idemsql.QueueCancelled || s.leasedBy != "" {
		q.fatal("Cancel", "left a held row %+v, want outcome cancelled, leased_by ''", s)
	}
	q.add("t", "waiting", "", now) // writes again
}

// sweep: Sweep deletes up to its limit of the rows finished before its time,
// and no unfinished or newer row.
func (q *queueT) sweep() {
	for i := range 5 {
		id := q.add("t", fmt.Sprint("old", i), "", now)
		q.affects("Finish", 1, "finishing a row", q.s.Finish, now+int64(i), idemsql.QueueApplied, "", id, 0)
	}
	newer := q.add("t", "new", "", now)
	q.affects("Finish", 1, "finishing a row", q.s.Finish, now+100, idemsql.QueueApplied, "", newer, 0)
	q.add("t", "unfinished", "", now-1000)
	q.affects("Sweep", 3, "5 rows finished before the bound, limit 3", q.s.Sweep, now+50, 3)
	q.affects("Sweep", 2, "the 2 rows left before the bound", q.s.Sweep, now+50, 3)
	q.affects("Sweep", 0, "nothing finished before the bound", q.s.Sweep, now+50, 3)
	if n := q.count("SELECT count(*) FROM idem_queue"); n != 2 {
		q.fatal("Sweep", "left %d rows, want 2 (the newer finished one and the unfinished one)", n)
	}
}

// status: Lag counts a topic's unfinished rows; Status counts, per topic with
// unfinished rows, the ready, running, retrying and scheduled ones, and the
// oldest created_at of the ready ones.
func (q *queueT) status() {
	at := func(id string, avail int64) {
		q.affects("Insert", 1, "a new message", q.s.Insert, id, "t", "", "{}", []byte{}, avail-100, avail)
	}
	at("ready1", now-10) // created now-110
	at("ready2", now)    // created now-100
	at("running", now)
	at("retrying", now)
	at("scheduled", now+1000)
	got := q.claim(now, now+100, "w", "t", 4) // all but scheduled are due now
	if len(got) != 4 {
		q.fatal("Claim", "leased %d, want 4", len(got))
	}
	for _, g := range got {
		switch g.msgID {
		case "ready1", "ready2": // back, due
			q.affects("Nak", 1, "back, due", q.s.Nak, now-5, "", g.id, 1)
		case "retrying": // back with a delay
			q.affects("Nak", 1, "back with a delay", q.s.Nak, now+60, "failed", g.id, 1)
		}
	}
	q.affects("Insert", 1, "a message of u", q.s.Insert, "x", "u", "", "{}", []byte{}, now, now+5)
	done := q.add("w", "done", "", now)
	q.affects("Finish", 1, "finishing", q.s.Finish, now, idemsql.QueueApplied, "", done, 0)

	var lag int64
	q.row("Lag", q.s.Lag, []any{"t"}, &lag)
	if lag != 5 {
		q.fatal("Lag", "counted %d unfinished rows of t, want 5", lag)
	}
	q.row("Lag", q.s.Lag, []any{"w"}, &lag)
	if lag != 0 {
		q.fatal("Lag", "counted %d unfinished rows of w (all finished), want 0", lag)
	}
	var lines []string
	q.rows("Status", q.s.Status, []any{now}, func(rows idemsql.Rows) error {
		var topic string
		var ready, running, retrying, scheduled int64
		var oldest *int64
		if err := rows.Scan(&topic, &ready, &running, &retrying, &scheduled, &oldest); err != nil {
			return err
		}
		o := "none"
		if oldest != nil {
			o = fmt.Sprint(*oldest - now)
		}
		lines = append(lines, fmt.Sprintf("%s ready %d running %d retrying %d scheduled %d oldest %s", topic, ready, running, retrying, scheduled, o))
		return nil
	})
	want := []string{"t ready 2 running 1 retrying 1 scheduled 1 oldest -110", "u ready 0 running 0 retrying 0 scheduled 1 oldest none"}
	if fmt.Sprint(lines) != fmt.Sprint(want) {
		q.fatal("Status", "returned\n%s\nwant\n%s", strings.Join(lines, "\n"), strings.Join(want, "\n"))
	}
}

// list: ListUnfinished pages unfinished rows by id upwards, ListFinished
// finished ones by id downwards, each of one topic or of all (”).
func (q *queueT) list() {
	var all []int64
	for i := range 6 {
		topic := "t"
		if i%3 == 2 {
			topic = "u"
		}
		all = append(all, q.add(topic, fmt.Sprint("m", i), "k", now))
	}
	for _, id := range all[3:] {
		q.affects("Finish", 1, "finishing", q.s.Finish, now+1, idemsql.QueueApplied, "", id, 0)
	}
	q.affects("Nak", 1, "a last error", q.s.Nak, now, "boom", all[0], 0)
	list := func(field, stmt, topic string, after int64, limit int) (out []int64) {
		q.rows(field, stmt, []any{topic, after, limit}, func(rows idemsql.Rows) error {
			var id, created, avail int64
			var attempts int
			var msgID, tp, key, leasedBy, lastError, outcome string
			var finished *int64
			if err := rows.Scan(&id, &msgID, &tp, &key, &attempts, &created, &avail, &leasedBy, &lastError, &finished, &outcome); err != nil {
				return err
			}
			if key != "k" || created != now || (topic != "" && tp != topic) || (finished == nil) != (outcome == "") ||
				(id == all[0] && lastError != "boom") || (msgID != fmt.Sprint("m", slices.Index(all, id))) {
				return fmt.Errorf("row %d: msg_id %s topic %s key %s created %d last_error %q finished %v outcome %q", id, msgID, tp, key, created, lastError, finished, outcome)
			}
			out = append(out, id)
			return nil
		})
		return out
	}
	for _, c := range []struct {
		field, stmt, topic string
		after              int64
		limit              int
		want               []int64
	}{
		{"ListUnfinished", q.s.ListUnfinished, "", 0, 10, all[:3]},
		{"ListUnfinished", q.s.ListUnfinished, "", all[0], 1, all[1:2]},
		{"ListUnfinished", q.s.ListUnfinished, "u", 0, 10, all[2:3]},
		{"ListUnfinished", q.s.ListUnfinished, "t", all[1], 10, nil},
		{"ListFinished", q.s.ListFinished, "", 1 << 62, 10, []int64{all[5], all[4], all[3]}},
		{"ListFinished", q.s.ListFinished, "", all[5], 1, []int64{all[4]}},
		{"ListFinished", q.s.ListFinished, "t", 1 << 62, 10, []int64{all[4], all[3]}},
		{"ListFinished", q.s.ListFinished, "u", all[5], 10, nil},
	} {
		if got := list(c.field, c.stmt, c.topic, c.after, c.limit); fmt.Sprint(got) != fmt.Sprint(c.want) {
			q.fatal(c.field, "of topic %q after %d limit %d returned %v, want %v", c.topic, c.after, c.limit, got, c.want)
		}
	}
}

// periodic: PeriodicEnsure writes a schedule's row once; PeriodicAdvance moves
// it to a later tick only, so of the processes that try one tick, one moves it.
func (q *queueT) periodic() {
	q.exec("PeriodicEnsure", q.s.PeriodicEnsure, "nightly")
	q.exec("PeriodicEnsure", q.s.PeriodicEnsure, "nightly")
	q.exec("PeriodicEnsure", q.s.PeriodicEnsure, "hourly")
	if n := q.count("SELECT count(*) FROM idem_queue_periodic WHERE name = 'nightly' AND last_tick = 0"); n != 1 {
		q.fatal("PeriodicEnsure", "left %d rows of nightly at tick 0, want 1", n)
	}
	q.affects("PeriodicAdvance", 1, "the first try of tick 1000", q.s.PeriodicAdvance, int64(1000), "nightly")
	q.affects("PeriodicAdvance", 0, "a second try of tick 1000", q.s.PeriodicAdvance, int64(1000), "nightly")
	q.affects("PeriodicAdvance", 0, "an earlier tick", q.s.PeriodicAdvance, int64(999), "nightly")
	q.affects("PeriodicAdvance", 0, "an unknown schedule", q.s.PeriodicAdvance, int64(5000), "weekly")
	q.affects("PeriodicAdvance", 1, "a later tick", q.s.PeriodicAdvance, int64(2000), "nightly")
	q.exec("PeriodicEnsure", q.s.PeriodicEnsure, "nightly") // leaves the tick alone
	if n := q.count("SELECT last_tick FROM idem_queue_periodic WHERE name = 'nightly'"); n != 2000 {
		q.fatal("PeriodicEnsure", "left nightly at tick %d, want 2000 (an existing row is left alone)", n)
	}
	if n := q.count("SELECT last_tick FROM idem_queue_periodic WHERE name = 'hourly'"); n != 0 {
		q.fatal("PeriodicAdvance", "moved another schedule to %d", n)
	}
}

// affects runs field's statement and fails unless it affected want rows.
func (q *queueT) affects(field string, want int64, why, stmt string, args ...any) {
	q.t.Helper()
	if n := q.exec(field, stmt, args...); n != want {
		q.fatal(field, "%s: affected %d rows, want %d\n%s", why, n, want, stmt)
	}
}
