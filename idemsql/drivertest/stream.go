package drivertest

import (
	"database/sql"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/migrate"
)

// Stream checks the driver's StreamSQL (package stream's SQL event store)
// against a database db opens for the test, fresh and empty: each statement does
// what its field's comment says, and a failure names the field.
func Stream(t *testing.T, db func(t *testing.T) idemsql.TxDB[*sql.Tx]) {
	r := newStmtRunner(t, db, "StreamSQL", migrate.Stream)
	s := streamRunner{stmtRunner: r, s: r.db.Driver.Stream()}
	s.heads()
	s.events()
	s.acks()
	s.trim()
}

type streamRunner struct {
	stmtRunner
	s *idemsql.StreamSQL
}

// event is a row of a read of events.
type event struct {
	seq         int64
	typ, entity string
	data        []byte
	at          int64
}

func (e event) String() string {
	return fmt.Sprintf("{seq %d, type %q, entity %q, data %q, at %d}", e.seq, e.typ, e.entity, e.data, e.at)
}

func (r streamRunner) readEvents(field, stmt string, args ...any) []event {
	r.t.Helper()
	var out []event
	r.rows(field, stmt, args, func(rows idemsql.Rows) error {
		var e event
		err := rows.Scan(&e.seq, &e.typ, &e.entity, &e.data, &e.at)
		out = append(out, e)
		return err
	})
	return out
}

// nextHead advances channel's head in a transaction of its own.
func (r streamRunner) nextHead(channel string) (head int64) {
	r.t.Helper()
	r.need("NextHead", r.s.NextHead)
	r.inTx("NextHead", func(q idemsql.Querier) (err error) {
		head, err = r.advanceIn(q, channel)
		return err
	})
	return head
}

// advanceIn advances channel's head with q as stream.SQLStore does.
func (r streamRunner) advanceIn(q idemsql.Querier, channel string) (head int64, err error) {
	if r.s.NextHeadRead == "" {
		err = q.QueryRow(r.ctx, r.s.NextHead, channel).Scan(&head)
		return head, err
	}
	if _, err := q.Exec(r.ctx, r.s.NextHead, channel); err != nil {
		return 0, err
	}
	err = q.QueryRow(r.ctx, r.s.NextHeadRead).Scan(&head)
	return head, err
}

func (r streamRunner) heads() {
	for _, st := range []struct {
		channel string
		want    int64
	}{{"a", 1}, {"a", 2}, {"b", 1}, {"a", 3}} {
		if got := r.nextHead(st.channel); got != st.want {
			r.errorf("NextHead", "moved the head of channel %s to %d, want %d", st.channel, got, st.want)
		}
	}
	var head int64
	if !r.row("Head", r.s.Head, []any{"a"}, &head) || head != 3 {
		r.errorf("Head", "read %d for channel a, want 3", head)
	}
	if r.row("Head", r.s.Head, []any{"none"}, &head) {
		r.errorf("Head", "read a row for a channel never appended to")
	}
	r.holds("NextHead", func(q idemsql.Querier) error { _, err := r.advanceIn(q, "locked"); return err })
	if got := r.nextHead("locked"); got != 3 {
		r.errorf("NextHead", "moved the head of a channel advanced twice to %d, want 3", got)
	}
}

func (r streamRunner) events() {
	insert := func(channel string, seq int64, key string, data []byte, at int64) error {
		var d any
		if data != nil {
			d = data
		}
		return r.execErr("InsertEvent", r.s.InsertEvent, channel, seq, fmt.Sprint("t", seq), fmt.Sprint("e", seq), d, key, at)
	}
	for _, e := range []struct {
		channel string
		seq     int64
		key     string
		data    []byte
		at      int64
	}{{"a", 1, "k1", nil, 100}, {"a", 2, "", []byte("x"), 200}, {"a", 3, "", nil, 300}, {"b", 1, "k1", nil, 150}} {
		if err := insert(e.channel, e.seq, e.key, e.data, e.at); err != nil {
			r.fatal("InsertEvent", "seq %d of channel %s (key %q): %v", e.seq, e.channel, e.key, err)
		}
	}
	if err := insert("a", 4, "k1", nil, 400); err == nil {
		r.errorf("InsertEvent", "wrote a second event of channel a with key k1: the unique index must refuse it")
	}
	for _, st := range []struct {
		channel, key string
		want         []event
	}{{"a", "k1", []event{{1, "t1", "e1", nil, 100}}}, {"b", "k1", []event{{1, "t1", "e1", nil, 150}}}, {"a", "k2", nil}} {
		if got := r.readEvents("EventByKey", r.s.EventByKey, st.channel, st.key); !slices.EqualFunc(got, st.want, sameEvent) {
			r.errorf("EventByKey", "read %v for key %s of channel %s, want %v", got, st.key, st.channel, st.want)
		}
	}
	all := []event{{1, "t1", "e1", nil, 100}, {2, "t2", "e2", []byte("x"), 200}, {3, "t3", "e3", nil, 300}}
	for _, st := range []struct {
		since, limit int64
		want         []event
	}{{0, 10, all}, {1, 1, all[1:2]}, {3, 10, nil}} {
		if got := r.readEvents("ReadEvents", r.s.ReadEvents, "a", st.since, st.limit); !slices.EqualFunc(got, st.want, sameEvent) {
			r.errorf("ReadEvents", "read %v above %d (limit %d), want %v", got, st.since, st.limit, st.want)
		}
	}
}

func sameEvent(a, b event) bool {
	return a.seq == b.seq && a.typ == b.typ && a.entity == b.entity && string(a.data) == string(b.data) &&
		(a.data == nil) == (b.data == nil) && a.at == b.at
}

// client reads client's row of channel with the suite's own query.
func (r streamRunner) client(field, channel, client string) (seq, seen int64, ok bool) {
	r.t.Helper()
	ok = r.row(field, "SELECT seq, seen FROM idem_stream_clients WHERE channel = $1 AND client = $2", []any{channel, client}, &seq, &seen)
	return seq, seen, ok
}

func (r streamRunner) acks() {
	r.exec("Ack", r.s.Ack, "a", "c1", int64(2), int64(100))
	r.exec("Ack", r.s.Ack, "a", "c1", int64(1), int64(200)) // below: only seen
	if seq, seen, ok := r.client("Ack", "a", "c1"); !ok || seq != 2 || seen != 200 {
		r.errorf("Ack", "left seq %d, seen %d (found %v), want 2, 200: an ack below the last one only marks the client as seen", seq, seen, ok)
	}
	r.exec("Ack", r.s.Ack, "a", "c1", int64(3), int64(250))
	if seq, _, _ := r.client("Ack", "a", "c1"); seq != 3 {
		r.errorf("Ack", "left seq %d after an ack of 3, want 3", seq)
	}
	r.exec("Ack", r.s.Ack, "a", "c2", int64(2), int64(50))
	if r.s.MaxKey > 0 {
		long := strings.Repeat("k", r.s.MaxKey)
		r.exec("Ack", r.s.Ack, long, long, int64(1), int64(300))
		if _, _, ok := r.client("MaxKey", long, long); !ok {
			r.errorf("MaxKey", "is %d, but a channel and client of %d bytes are not kept whole", r.s.MaxKey, r.s.MaxKey)
		}
	}
}

func (r streamRunner) trim() {
	for _, c := range []struct {
		client string
		seen   int64
	}{{"x1", 100}, {"x2", 200}, {"x3", 200}} {
		r.exec("Ack", r.s.Ack, "x", c.client, int64(1), c.seen)
	}
	r.exec("ForgetIdleClients", r.s.ForgetIdleClients, int64(75))
	if _, _, ok := r.client("ForgetIdleClients", "a", "c2"); ok {
		r.errorf("ForgetIdleClients", "kept a client seen before the bound")
	}
	if _, _, ok := r.client("ForgetIdleClients", "a", "c1"); !ok {
		r.errorf("ForgetIdleClients", "deleted a client seen after the bound")
	}
	r.exec("ForgetExtraClients", r.s.ForgetExtraClients, 1)
	for client, want := range map[string]bool{"x1": false, "x2": true, "x3": false} {
		if _, _, ok := r.client("ForgetExtraClients", "x", client); ok != want {
			r.errorf("ForgetExtraClients", "kept client %s: %v, want %v (the most recently seen, ties to the lower id)", client, ok, want)
		}
	}
	if _, _, ok := r.client("ForgetExtraClients", "a", "c1"); !ok {
		r.errorf("ForgetExtraClients", "deleted the one client of channel a")
	}
	if n := r.exec("TrimOld", r.s.TrimOld, int64(150)); n != 1 {
		r.errorf("TrimOld", "deleted %d events appended before 150, want 1", n)
	}
	r.exec("Ack", r.s.Ack, "a", "c1", int64(2), int64(300)) // below 3: seq stays 3
	if n := r.exec("TrimAcked", r.s.TrimAcked); n != 2 {
		r.errorf("TrimAcked", "deleted %d events, want 2 (seqs 2 and 3 of channel a, acknowledged up to 3)", n)
	}
	if got := r.readEvents("ReadEvents", r.s.ReadEvents, "b", 0, 10); len(got) != 1 {
		r.errorf("TrimAcked", "left %v of channel b, which has no clients, want its one event", got)
	}
}
