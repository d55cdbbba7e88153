package drivertest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/migrate"
)

// Outbox checks a driver's idemsql.OutboxSQL against a real database: enqueue,
// the claims of its way of taking partitions, the marks, stall, backlog and
// cleanup, the relay instances, the operator's parked messages (park, list,
// discard, retry, and the log-based relay's parking), and the audit's reads and
// repairs. db opens a fresh database
// for each subtest; the outbox's migrations are applied to it.
func Outbox(t *testing.T, db func(t *testing.T) idemsql.TxDB[*sql.Tx]) {
	for _, c := range []struct {
		name string
		fn   func(o *outboxT)
	}{
		{"Enqueue", (*outboxT).enqueue},
		{"Claim", (*outboxT).claims},
		{"Mark", (*outboxT).marks},
		{"Backlog", (*outboxT).backlog},
		{"Relays", (*outboxT).relays},
		{"Parked", (*outboxT).parked},
		{"ParkedByCDC", (*outboxT).parkedByCDC},
		{"Audit", (*outboxT).audit},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.fn(newOutboxT(t, db(t)))
		})
	}
}

// now is the time of the rows these tests write, in Unix milliseconds.
const now = int64(1_700_000_000_000)

// outboxT is one subtest's database and the driver's statements.
type outboxT struct {
	t   *testing.T
	ctx context.Context
	db  idemsql.TxDB[*sql.Tx]
	s   *idemsql.OutboxSQL
}

func newOutboxT(t *testing.T, db idemsql.TxDB[*sql.Tx]) *outboxT {
	t.Helper()
	ctx := context.Background()
	if err := migrate.Up(ctx, db, migrate.Outbox); err != nil {
		t.Fatalf("migrate the outbox: %v", err)
	}
	return &outboxT{t: t, ctx: ctx, db: db, s: db.Driver.Outbox()}
}

// exec runs the statement of field in a transaction of its own and returns the
// rows it affected.
func (o *outboxT) exec(field, query string, args ...any) (n int64) {
	o.t.Helper()
	err := o.db.InTx(o.ctx, func(tx *sql.Tx) (err error) {
		n, err = o.db.Querier(tx).Exec(o.ctx, query, args...)
		return err
	})
	if err != nil {
		o.t.Fatalf("OutboxSQL.%s: %v", field, err)
	}
	return n
}

// scan reads the one row of field's statement into dest.
func (o *outboxT) scan(field, query string, args []any, dest ...any) {
	o.t.Helper()
	err := o.db.InTx(o.ctx, func(tx *sql.Tx) error {
		return o.db.Querier(tx).QueryRow(o.ctx, query, args...).Scan(dest...)
	})
	if err != nil {
		o.t.Fatalf("OutboxSQL.%s: %v", field, err)
	}
}

// ints returns the first column of field's rows, read with q.
func (o *outboxT) ints(q idemsql.Querier, field, query string, args ...any) []int64 {
	o.t.Helper()
	return rowsOf(o, q, field, query, args, func(rows idemsql.Rows) (v int64, err error) { return v, rows.Scan(&v) })
}

// rowsOf reads the rows of field's statement with q, each made by scan.
func rowsOf[T any](o *outboxT, q idemsql.Querier, field, query string, args []any, scan func(idemsql.Rows) (T, error)) []T {
	o.t.Helper()
	rows, err := q.Query(o.ctx, query, args...)
	if err != nil {
		o.t.Fatalf("OutboxSQL.%s: %v", field, err)
	}
	defer rows.Close()
	var out []T
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			o.t.Fatalf("OutboxSQL.%s: its columns: %v", field, err)
		}
		out = append(out, v)
	}
	if err := rows.Err(); err != nil {
		o.t.Fatalf("OutboxSQL.%s: %v", field, err)
	}
	return out
}

// readRows is rowsOf outside a transaction where the database can (read).
func readRows[T any](o *outboxT, field, query string, args []any, scan func(idemsql.Rows) (T, error)) (out []T) {
	o.t.Helper()
	o.read(func(q idemsql.Querier) { out = rowsOf(o, q, field, query, args, scan) })
	return out
}

// add writes a message with Insert, the statement of services in other languages,
// and returns its row's id.
func (o *outboxT) add(msgID, key string, part int, headers string) int64 {
	o.t.Helper()
	if n := o.exec("Insert", o.s.Insert, msgID, "topic", key, part, headers, []byte("p-"+msgID), now); n != 1 {
		o.t.Fatalf("OutboxSQL.Insert affected %d rows, want 1", n)
	}
	return o.id(msgID)
}

// id is the row id of message msgID.
func (o *outboxT) id(msgID string) (id int64) {
	o.t.Helper()
	o.scan("(the test's own read)", "SELECT id FROM idem_outbox WHERE msg_id = $1", []any{msgID}, &id)
	return id
}

// state is a row as the tests check it.
type state struct {
	attempts                            int64
	lastError                           string
	available                           int64
	published, parked                   *int64
	msgID, key, headers, createdProblem string
}

func (o *outboxT) state(id int64) (s state) {
	o.t.Helper()
	var created int64
	o.scan("(the test's own read)", `SELECT attempts, last_error, available_at, published_at, parked_at, msg_id, ordering_key, headers, created_at
		FROM idem_outbox WHERE id = $1`, []any{id}, &s.attempts, &s.lastError, &s.available, &s.published, &s.parked,
		&s.msgID, &s.key, &s.headers, &created)
	if created != s.available {
		s.createdProblem = "created_at differs from available_at"
	}
	return s
}

// enqueue: Insert, InsertRows (up to MaxInsertRows) and InsertArrays write rows in
// the order given, created and available at now.
func (o *outboxT) enqueue() {
	t := o.t
	o.add("one", "", 1, "{}")
	n := 3
	if o.s.MaxInsertRows > 0 {
		n = o.s.MaxInsertRows
	}
	args := []any{now}
	for i := range n {
		args = append(args, fmt.Sprintf("rows-%03d", i), "topic", "k", int32(2), `{"h":"v"}`, []byte{byte(i)})
	}
	if got := o.exec("InsertRows", o.s.InsertRows(n), args...); got != int64(n) {
		t.Fatalf("OutboxSQL.InsertRows(%d) affected %d rows, want %d", n, got, n)
	}
	if o.s.InsertArrays != "" {
		for _, c := range []struct{ field, query string }{{"InsertArrays", o.s.InsertArrays}, {"InsertArraysNotify", o.s.InsertArraysNotify}} {
			if c.query == "" {
				continue
			}
			o.exec(c.field, c.query, []string{c.field + "-1", c.field + "-2"}, []string{"topic", "topic"}, []string{"k", ""},
				[]int32{3, 4}, []string{"{}", "{}"}, [][]byte{{1}, {}}, now)
			if a, b := o.id(c.field+"-1"), o.id(c.field+"-2"); a >= b {
				t.Errorf("OutboxSQL.%s wrote its rows out of the arrays' order (ids %d, %d)", c.field, a, b)
			}
		}
	}
	written := readRows(o, "InsertRows", "SELECT id FROM idem_outbox WHERE msg_id LIKE 'rows-%' ORDER BY id", nil,
		func(rows idemsql.Rows) (id int64, err error) { return id, rows.Scan(&id) })
	if len(written) != n {
		t.Fatalf("OutboxSQL.InsertRows(%d) wrote %d rows", n, len(written))
	}
	for i, id := range written {
		s := o.state(id)
		if want := fmt.Sprintf("rows-%03d", i); s.msgID != want {
			t.Fatalf("OutboxSQL.InsertRows: row %d of %d is %q, want %q: the rows must get ids in the order given", i, n, s.msgID, want)
		}
		if s.createdProblem != "" || s.available != now || s.key != "k" || s.headers != `{"h":"v"}` {
			t.Fatalf("OutboxSQL.InsertRows wrote row %d as %+v", id, s)
		}
	}
}

// read runs fn outside a transaction where the database can (TxDB.Auto), in one
// otherwise.
func (o *outboxT) read(fn func(q idemsql.Querier)) {
	o.t.Helper()
	if err := o.db.Auto(o.ctx, func(q idemsql.Querier) error { fn(q); return nil }); err != nil {
		o.t.Fatal(err)
	}
}

// claimRows writes the rows the claims are checked on: a and b of key k in
// partition 1, c in partition 2 with headers too long to read where the database
// can hold them, d of key j in partition 3 backing off, e behind it, and rows
// published and parked.
func (o *outboxT) claimRows() (a, b, c int64) {
	a, b = o.add("a", "k", 1, "{}"), o.add("b", "k", 1, "{}")
	c = o.add("c", "", 2, "{}")
	d := o.add("d", "j", 3, "{}")
	o.add("e", "j", 3, "{}")
	o.exec("MarkFailed", o.s.MarkFailed, 1, "refused", now+60_000, nil, d)
	p := o.add("published", "", 1, "{}")
	o.markPublished(p)
	q := o.add("parked", "", 2, "{}")
	o.exec("MarkFailed", o.s.MarkFailed, 10, "refused", now, now, q)
	return a, b, c
}

// claimed reads a claim's rows with q and checks their columns; it returns their
// msg_ids.
func (o *outboxT) claimed(q idemsql.Querier, field, query string, args ...any) []string {
	o.t.Helper()
	return rowsOf(o, q, field, query, args, func(rows idemsql.Rows) (string, error) {
		var id, attempts, created, part, idLen, topicLen, keyLen, headersLen, payloadLen int64
		var msgID, topic, key, headers *string
		var payload *[]byte
		if err := rows.Scan(&id, &attempts, &created, &part, &msgID, &idLen, &topic, &topicLen, &key, &keyLen,
			&headers, &headersLen, &payload, &payloadLen); err != nil {
			return "", err
		}
		switch {
		case msgID == nil || topic == nil || key == nil || headers == nil || payload == nil:
			o.t.Fatalf("OutboxSQL.%s: a column within its bound read NULL", field)
		case idLen != int64(len(*msgID)) || headersLen != int64(len(*headers)) || payloadLen != int64(len(*payload)) || *topic != "topic":
			o.t.Fatalf("OutboxSQL.%s: row %q: each bounded column is its value, then its length in bytes", field, *msgID)
		case created != now:
			o.t.Fatalf("OutboxSQL.%s: row %q: created_at is the third column: got %d", field, *msgID, created)
		}
		return *msgID, nil
	})
}

// claims: the claims of the driver's way of taking partitions read the due rows in
// id order, and two transactions never hold one partition.
func (o *outboxT) claims() {
	t := o.t
	o.claimRows()
	want := []string{"a", "b", "c"}
	switch {
	case o.s.SingleWriter:
		o.read(func(q idemsql.Querier) {
			if got := o.claimed(q, "Claim", o.s.Claim, now, 10); !slices.Equal(got, want) {
				t.Errorf("OutboxSQL.Claim read %v, want %v (the due rows in id order)", got, want)
			}
			if got := o.claimed(q, "Claim", o.s.Claim, now, 2); !slices.Equal(got, want[:2]) {
				t.Errorf("OutboxSQL.Claim with limit 2 read %v, want %v", got, want[:2])
			}
		})
	case o.s.LockPartitions != "":
		o.lockPartitions(want)
	case o.s.LockParts != nil:
		o.lockParts(want)
	default:
		t.Fatal("OutboxSQL sets none of SingleWriter, LockPartitions and LockParts: a relay cannot take partitions")
	}
}

// inTxs begins two transactions as a round does, rolled back when t ends.
func (o *outboxT) inTxs() (idemsql.Querier, idemsql.Querier) {
	begin := o.db.Begin
	if o.s.ReadCommittedClaims {
		if o.db.BeginReadCommitted == nil {
			o.t.Fatal("OutboxSQL.ReadCommittedClaims is set and TxDB.BeginReadCommitted is not")
		}
		begin = o.db.BeginReadCommitted
	}
	var qs [2]idemsql.Querier
	for i := range qs {
		tx, err := begin(o.ctx)
		if err != nil {
			o.t.Fatal(err)
		}
		o.t.Cleanup(func() { _ = o.db.Rollback(o.ctx, tx) })
		qs[i] = o.db.Querier(tx)
	}
	return qs[0], qs[1]
}

func (o *outboxT) lockPartitions(want []string) {
	t := o.t
	q1, q2 := o.inTxs()
	held := o.ints(q1, "LockPartitions", o.s.LockPartitions, now, 64)
	slices.Sort(held)
	if !slices.Equal(held, []int64{1, 2, 3}) {
		t.Fatalf("OutboxSQL.LockPartitions took %v, want [1 2 3] (the partitions with pending rows not backing off)", held)
	}
	if other := o.ints(q2, "LockPartitions", o.s.LockPartitions, now, 64); len(other) > 0 {
		t.Fatalf("OutboxSQL.LockPartitions took %v in a second transaction while the first held them", other)
	}
	parts := []int32{1, 2, 3}
	if got := o.claimed(q1, "ClaimParts", o.s.ClaimParts, now, 10, parts, int64(0)); !slices.Equal(got, want) {
		t.Errorf("OutboxSQL.ClaimParts read %v, want %v (the due rows in id order)", got, want)
	}
	if got := o.claimed(q1, "ClaimParts", o.s.ClaimParts, now, 10, []int32{1}, o.id("a")); !slices.Equal(got, []string{"b"}) {
		t.Errorf("OutboxSQL.ClaimParts of partition 1 after a's id read %v, want [b]", got)
	}
	if got := o.claimed(q1, "ClaimParts", o.s.ClaimParts, now, 2, parts, int64(0)); !slices.Equal(got, want[:2]) {
		t.Errorf("OutboxSQL.ClaimParts with limit 2 read %v, want %v", got, want[:2])
	}
}

func (o *outboxT) lockParts(want []string) {
	t := o.t
	q1, q2 := o.inTxs()
	due := o.ints(q1, "DueParts", o.s.DueParts)
	slices.Sort(due)
	if !slices.Equal(due, []int64{1, 2, 3}) {
		t.Fatalf("OutboxSQL.DueParts listed %v, want [1 2 3] (the partitions with pending rows)", due)
	}
	if held := o.ints(q1, "LockParts", o.s.LockParts(3, 2), 1, 2, 3); !slices.Equal(held, []int64{1, 2}) {
		t.Fatalf("OutboxSQL.LockParts(3, 2) of 1, 2, 3 took %v, want [1 2]", held)
	}
	if held := o.ints(q2, "LockParts", o.s.LockParts(3, 3), 1, 2, 3); !slices.Equal(held, []int64{3}) {
		t.Fatalf("OutboxSQL.LockParts in a second transaction took %v, want [3]: it skips the partitions another holds", held)
	}
	var got []string
	for _, p := range []int32{1, 2, 3} {
		got = append(got, o.claimed(q1, "ClaimPart", o.s.ClaimPart, now, 10, p)...)
	}
	if !slices.Equal(got, want) {
		t.Errorf("OutboxSQL.ClaimPart of partitions 1, 2, 3 read %v, want %v", got, want)
	}
	if got := o.claimed(q1, "ClaimPart", o.s.ClaimPart, now, 1, int32(1)); !slices.Equal(got, want[:1]) {
		t.Errorf("OutboxSQL.ClaimPart with limit 1 read %v, want %v", got, want[:1])
	}
	if got := o.claimed(q1, "ClaimStrays", o.s.ClaimStrays, now, 10); len(got) > 0 {
		t.Errorf("OutboxSQL.ClaimStrays read %v where every part is in range", got)
	}
	o.add("stray", "", 70, "{}")
	o.read(func(q idemsql.Querier) {
		if got := o.ints(q, "DueParts", o.s.DueParts); !slices.Contains(got, -1) {
			t.Errorf("OutboxSQL.DueParts listed %v with a row of part 70 pending, want -1 among them", got)
		}
		if got := o.claimed(q, "ClaimStrays", o.s.ClaimStrays, now, 10); !slices.Equal(got, []string{"stray"}) {
			t.Errorf("OutboxSQL.ClaimStrays read %v, want [stray]", got)
		}
	})
}

func (o *outboxT) markPublished(ids ...int64) {
	o.t.Helper()
	if o.s.MarkPublishedArray != "" {
		o.exec("MarkPublishedArray", o.s.MarkPublishedArray, now+1, ids)
		return
	}
	args := []any{now + 1}
	for _, id := range ids {
		args = append(args, id)
	}
	o.exec("MarkPublished", o.s.MarkPublished(len(ids)), args...)
}

// marks: MarkPublished (or MarkPublishedArray), MarkPublishedIDs (where filled)
// and MarkFailed set their columns.
func (o *outboxT) marks() {
	t := o.t
	a, b, c := o.add("a", "", 1, "{}"), o.add("b", "", 1, "{}"), o.add("c", "", 1, "{}")
	o.markPublished(a, b)
	for _, id := range []int64{a, b} {
		if s := o.state(id); s.published == nil || *s.published != now+1 {
			t.Errorf("OutboxSQL.MarkPublished(Array): row %d's published_at is %v, want %d", id, s.published, now+1)
		}
	}
	if s := o.state(c); s.published != nil {
		t.Errorf("OutboxSQL.MarkPublished(Array) published row %d, which it was not given", c)
	}
	o.marksIDs(a)
	o.exec("MarkFailed", o.s.MarkFailed, 3, "refused", now+500, nil, c)
	if s := o.state(c); s.attempts != 3 || s.lastError != "refused" || s.available != now+500 || s.parked != nil {
		t.Errorf("OutboxSQL.MarkFailed wrote %+v", s)
	}
	o.exec("MarkFailed", o.s.MarkFailed, 4, "parked", now+900, now+9, c)
	if s := o.state(c); s.parked == nil || *s.parked != now+9 {
		t.Errorf("OutboxSQL.MarkFailed with parked_at wrote %+v", s)
	}
}

// marksIDs checks MarkPublishedIDs, where the driver fills it (a log-based
// relay's mark), given published row pub: it publishes the rows given, by id,
// and leaves a published row's time as it was.
func (o *outboxT) marksIDs(pub int64) {
	t := o.t
	if o.s.MarkPublishedIDs == "" {
		return
	}
	d, e := o.add("d", "", 1, "{}"), o.add("e", "", 1, "{}")
	if n := o.exec("MarkPublishedIDs", o.s.MarkPublishedIDs, now+7, []int64{pub, d}); n != 1 {
		t.Errorf("OutboxSQL.MarkPublishedIDs of a published row and a pending one affected %d rows, want 1: the pending one", n)
	}
	if s := o.state(d); s.published == nil || *s.published != now+7 {
		t.Errorf("OutboxSQL.MarkPublishedIDs: row %d's published_at is %v, want %d", d, s.published, now+7)
	}
	if s := o.state(pub); s.published == nil || *s.published != now+1 {
		t.Errorf("OutboxSQL.MarkPublishedIDs moved published row %d's published_at to %v, want it kept at %d", pub, s.published, now+1)
	}
	if s := o.state(e); s.published != nil {
		t.Errorf("OutboxSQL.MarkPublishedIDs published row %d, which it was not given", e)
	}
}

// backlog: Stall, Backlog and Cleanup.
func (o *outboxT) backlog() {
	t := o.t
	var waiting int64
	var last *int64
	o.scan("Stall", o.s.Stall, nil, &waiting, &last)
	if waiting != 0 || last != nil {
		t.Errorf("OutboxSQL.Stall of an empty outbox = %d, %v; want 0, NULL", waiting, last)
	}
	ids := []int64{o.add("a", "", 1, "{}"), o.add("b", "", 1, "{}"), o.add("c", "", 1, "{}")}
	o.add("pending", "", 1, "{}")
	parked, discarded := o.add("parked", "", 1, "{}"), o.add("discarded", "", 1, "{}")
	o.exec("Park", o.s.Park, now, "refused", parked)
	o.exec("Park", o.s.Park, now, "refused", discarded)
	o.exec("Discard", o.s.Discard, discarded, now, "dropped")
	o.markPublished(ids...)
	o.scan("Stall", o.s.Stall, nil, &waiting, &last)
	if waiting != 1 || last == nil || *last != now+1 {
		t.Errorf("OutboxSQL.Stall = %d, %v; want 1 and the newest published_at, %d", waiting, last, now+1)
	}
	var unpublished, parkedN int64
	var oldest *int64
	o.scan("Backlog", o.s.Backlog, nil, &unpublished, &parkedN, &oldest)
	if unpublished != 1 || parkedN != 1 || oldest == nil || *oldest != now {
		t.Errorf("OutboxSQL.Backlog = %d, %d, %v; want 1 waiting, 1 parked (the discarded one left out), oldest %d", unpublished, parkedN, oldest, now)
	}
	if n := o.exec("Cleanup", o.s.Cleanup, now+1, 10); n != 0 {
		t.Errorf("OutboxSQL.Cleanup before the publications deleted %d rows", n)
	}
	if n := o.exec("Cleanup", o.s.Cleanup, now+2, 2); n != 2 {
		t.Errorf("OutboxSQL.Cleanup with limit 2 deleted %d rows, want 2", n)
	}
	if n := o.exec("Cleanup", o.s.Cleanup, now+2, 2); n != 1 {
		t.Errorf("OutboxSQL.Cleanup deleted %d rows, want the last published one", n)
	}
}

// relays: UpsertRelay, ListRelays, DeleteStaleRelays and DeleteRelay.
func (o *outboxT) relays() {
	t := o.t
	o.exec("UpsertRelay", o.s.UpsertRelay, "r1", "host", 7, now, now, 1000, 0, "")
	o.exec("UpsertRelay", o.s.UpsertRelay, "r1", "host2", 8, now+5, now+5, 20_000, 42, "failed")
	o.exec("UpsertRelay", o.s.UpsertRelay, "r2", "host", 9, now, now, 1000, 0, "")
	type relay struct {
		instance, host                      string
		pid, started, last, poll, published int64
		lastError                           string
	}
	list := func(after int64, limit int) []relay {
		return readRows(o, "ListRelays", o.s.ListRelays, []any{after, limit}, func(rows idemsql.Rows) (r relay, err error) {
			return r, rows.Scan(&r.instance, &r.host, &r.pid, &r.started, &r.last, &r.poll, &r.published, &r.lastError)
		})
	}
	got := list(0, 10)
	if want := (relay{"r1", "host2", 8, now, now + 5, 20_000, 42, "failed"}); len(got) != 2 || got[0] != want || got[1].instance != "r2" {
		t.Fatalf("OutboxSQL.UpsertRelay or ListRelays: read %+v, want r1 as %+v (UpsertRelay keeps started_at, takes the rest), then r2", got, want)
	}
	if got := list(0, 1); len(got) != 1 {
		t.Errorf("OutboxSQL.ListRelays with limit 1 read %d rows", len(got))
	}
	// r1 turns stale 3 poll intervals (60 s) after its last round, r2 after 30 s.
	if got := list(now+30_000+1, 10); len(got) != 1 || got[0].instance != "r1" {
		t.Errorf("OutboxSQL.ListRelays of the rows stale at now+30.001 s or later read %+v, want r1", got)
	}
	if n := o.exec("DeleteStaleRelays", o.s.DeleteStaleRelays, now+30_000+1); n != 1 {
		t.Errorf("OutboxSQL.DeleteStaleRelays deleted %d rows, want r2's", n)
	}
	if n := o.exec("DeleteRelay", o.s.DeleteRelay, "r1"); n != 1 {
		t.Errorf("OutboxSQL.DeleteRelay deleted %d rows, want 1", n)
	}
}

// parkedMsg is a row of a read of parked messages.
type parkedMsg struct {
	id                         int64
	msgID, topic, key, headers string
	payload                    []byte
	attempts                   int64
	lastError                  string
	parkedAt                   int64
	discardedAt                *int64
	reason                     string
}

func (o *outboxT) listParked(field, query string, args ...any) []parkedMsg {
	o.t.Helper()
	return readRows(o, field, query, args, func(rows idemsql.Rows) (p parkedMsg, err error) {
		return p, rows.Scan(&p.id, &p.msgID, &p.topic, &p.key, &p.headers, &p.payload, &p.attempts, &p.lastError,
			&p.parkedAt, &p.discardedAt, &p.reason)
	})
}

// parked: Park, the reads of parked messages, LockParked, Discard, Discarded,
// Retry, and the status counts.
func (o *outboxT) parked() {
	t := o.t
	a, b := o.add("a", "k", 5, `{"h":"v"}`), o.add("b", "", 5, "{}")
	pending := o.add("pending", "", 6, "{}")
	if n := o.exec("Park", o.s.Park, now+1, "refused", a); n != 1 {
		t.Fatalf("OutboxSQL.Park affected %d rows, want 1", n)
	}
	o.exec("Park", o.s.Park, now+2, "refused again", b)
	if s := o.state(a); s.attempts != 1 || s.lastError != "refused" || s.parked == nil || *s.parked != now+1 {
		t.Errorf("OutboxSQL.Park wrote %+v: want attempts counted, last_error and parked_at set", s)
	}
	got := o.listParked("ParkedPending", o.s.ParkedPending, 10)
	if len(got) != 2 || got[0].id != a || got[1].id != b {
		t.Fatalf("OutboxSQL.ParkedPending read %+v, want rows %d and %d", got, a, b)
	}
	if p := got[0]; p.msgID != "a" || p.topic != "topic" || p.key != "k" || p.headers != `{"h":"v"}` || string(p.payload) != "p-a" ||
		p.attempts != 1 || p.lastError != "refused" || p.parkedAt != now+1 || p.discardedAt != nil || p.reason != "" {
		t.Errorf("OutboxSQL.ParkedPending read %+v", p)
	}
	o.lockParked(a, true)
	o.lockParked(pending, false)
	if n := o.exec("Discard", o.s.Discard, a, now+3, "dropped"); n != 1 {
		t.Errorf("OutboxSQL.Discard affected %d rows, want 1", n)
	}
	if n := o.exec("Discard", o.s.Discard, a, now+4, "again"); n != 0 {
		t.Errorf("OutboxSQL.Discard of a discarded message affected %d rows, want 0 (and no error)", n)
	}
	if n := o.count("Discarded", o.s.Discarded, a); n != 1 {
		t.Errorf("OutboxSQL.Discarded = %d, want 1", n)
	}
	if got := o.listParked("ParkedPending", o.s.ParkedPending, 10); len(got) != 1 || got[0].id != b {
		t.Errorf("OutboxSQL.ParkedPending read %+v, want row %d alone (no discarded one)", got, b)
	}
	got = o.listParked("ParkedAfter", o.s.ParkedAfter, 0, 10)
	if len(got) != 2 || got[0].discardedAt == nil || *got[0].discardedAt != now+3 || got[0].reason != "dropped" {
		t.Errorf("OutboxSQL.ParkedAfter read %+v, want both, the first discarded at %d for \"dropped\"", got, now+3)
	}
	if got := o.listParked("ParkedAfter", o.s.ParkedAfter, a, 1); len(got) != 1 || got[0].id != b {
		t.Errorf("OutboxSQL.ParkedAfter(%d, 1) read %+v, want row %d", a, got, b)
	}
	o.status()
	o.exec("Retry", o.s.Retry, now+5, b)
	if s := o.state(b); s.parked != nil || s.attempts != 0 || s.available != now+5 {
		t.Errorf("OutboxSQL.Retry wrote %+v: want parked_at NULL, attempts 0, available_at %d", s, now+5)
	}
}

// status: StatusPartitions and StatusDiscarded, with a parked (a), a discarded (b)
// and a pending message.
func (o *outboxT) status() {
	t := o.t
	type part struct {
		topic                     string
		part, unpublished, parked int64
		oldest                    *int64
	}
	parts := readRows(o, "StatusPartitions", o.s.StatusPartitions, nil, func(rows idemsql.Rows) (p part, err error) {
		return p, rows.Scan(&p.topic, &p.part, &p.unpublished, &p.parked, &p.oldest)
	})
	discarded := readRows(o, "StatusDiscarded", o.s.StatusDiscarded, nil, func(rows idemsql.Rows) (d [3]any, err error) {
		var topic string
		var p, n int64
		err = rows.Scan(&topic, &p, &n)
		return [3]any{topic, p, n}, err
	})
	if len(parts) != 2 || parts[0].part != 5 || parts[0].unpublished != 0 || parts[0].parked != 2 || parts[0].oldest != nil ||
		parts[1].part != 6 || parts[1].unpublished != 1 || parts[1].oldest == nil || *parts[1].oldest != now {
		t.Errorf("OutboxSQL.StatusPartitions read %+v, want partition 5 with 2 parked, partition 6 with 1 waiting since %d", parts, now)
	}
	if len(discarded) != 1 || discarded[0] != [3]any{"topic", int64(5), int64(1)} {
		t.Errorf("OutboxSQL.StatusDiscarded read %v, want [[topic 5 1]]", discarded)
	}
}

// lockParked checks LockParked of id, which is parked or not.
func (o *outboxT) lockParked(id int64, parked bool) {
	var got int64
	err := o.db.InTx(o.ctx, func(tx *sql.Tx) error {
		return o.db.Querier(tx).QueryRow(o.ctx, o.s.LockParked, id).Scan(&got)
	})
	switch {
	case parked && (err != nil || got != id):
		o.t.Errorf("OutboxSQL.LockParked of parked row %d: %d, %v", id, got, err)
	case !parked && !errors.Is(err, sql.ErrNoRows):
		o.t.Errorf("OutboxSQL.LockParked of pending row %d: %d, %v; want no row", id, got, err)
	}
}

func (o *outboxT) count(field, query string, id int64) (n int64) {
	o.t.Helper()
	o.scan(field, query, []any{id}, &n)
	return n
}

// parkedByCDC: InsertParked (and LastInsertID), MarkCDCParked, CDCParked, and
// Retry's Reinsert, DeleteRow and UnmarkCDCParked.
func (o *outboxT) parkedByCDC() {
	t := o.t
	var id int64
	err := o.db.InTx(o.ctx, func(tx *sql.Tx) error {
		q := o.db.Querier(tx)
		args := []any{"cdc", "topic", "k", 9, "{}", []byte("body"), now, "undecodable"}
		if o.s.LastInsertID == "" {
			return q.QueryRow(o.ctx, o.s.InsertParked, args...).Scan(&id)
		}
		if _, err := q.Exec(o.ctx, o.s.InsertParked, args...); err != nil {
			return err
		}
		return q.QueryRow(o.ctx, o.s.LastInsertID).Scan(&id)
	})
	if err != nil {
		t.Fatalf("OutboxSQL.InsertParked (LastInsertID): %v", err)
	}
	if want := o.id("cdc"); id != want {
		t.Fatalf("OutboxSQL.InsertParked (LastInsertID) returned id %d, want the new row's, %d", id, want)
	}
	if s := o.state(id); s.parked == nil || *s.parked != now || s.attempts != 1 || s.lastError != "undecodable" || s.createdProblem != "" {
		t.Errorf("OutboxSQL.InsertParked wrote %+v", s)
	}
	o.exec("MarkCDCParked", o.s.MarkCDCParked, id)
	o.exec("MarkCDCParked", o.s.MarkCDCParked, id)
	if n := o.count("CDCParked", o.s.CDCParked, id); n != 1 {
		t.Errorf("OutboxSQL.CDCParked = %d after two MarkCDCParked, want 1", n)
	}
	if n := o.exec("Reinsert", o.s.Reinsert, now+7, id); n != 1 {
		t.Fatalf("OutboxSQL.Reinsert affected %d rows, want 1", n)
	}
	o.exec("DeleteRow", o.s.DeleteRow, id)
	o.exec("UnmarkCDCParked", o.s.UnmarkCDCParked, id)
	if n := o.count("CDCParked", o.s.CDCParked, id); n != 0 {
		t.Errorf("OutboxSQL.CDCParked = %d after UnmarkCDCParked, want 0", n)
	}
	copyID := o.id("cdc")
	if s := o.state(copyID); copyID == id || s.parked != nil || s.attempts != 0 || s.available != now+7 || s.key != "k" || s.createdProblem != "" {
		t.Errorf("OutboxSQL.Reinsert wrote row %d as %+v: want a new pending row of the message, created at %d", copyID, s, now+7)
	}
}
