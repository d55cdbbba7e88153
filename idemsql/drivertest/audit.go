package drivertest

import (
	"database/sql"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemsql"
)

// The audit's statements (package audit): OutboxSQL's AuditPublished,
// RepairCopy, RecordRepair, RepairsOf and Repairs, InboxSQL's DeadLettered and
// RecordsSQL's Applied.

// audited is a row of AuditPublished.
type audited struct {
	id                 int64
	msgID, topic       *string
	created, published int64
	repairOf           *int64
}

func (a audited) String() string {
	return fmt.Sprintf("{id %d msg_id %s topic %s created %d published %d repair_of %v}", a.id, short(a.msgID), short(a.topic),
		a.created, a.published, deref(a.repairOf))
}

// short prints a text column, cut.
func short(s *string) string {
	switch {
	case s == nil:
		return "NULL"
	case len(*s) > 12:
		return fmt.Sprintf("%q…(%d bytes)", (*s)[:12], len(*s))
	}
	return fmt.Sprintf("%q", *s)
}

// auditPage reads a page of AuditPublished: after (afterAt, afterID), published
// before until, at most limit rows.
func (o *outboxT) auditPage(afterAt, afterID, until int64, limit int) []audited {
	o.t.Helper()
	if o.s.AuditPublished == "" {
		o.t.Fatal("OutboxSQL.AuditPublished is empty")
	}
	return readRows(o, "AuditPublished", o.s.AuditPublished, []any{afterAt, afterID, until, limit}, func(rows idemsql.Rows) (a audited, err error) {
		return a, rows.Scan(&a.id, &a.msgID, &a.topic, &a.created, &a.published, &a.repairOf)
	})
}

func auditedIDs(as []audited) []int64 {
	out := make([]int64, len(as))
	for i, a := range as {
		out[i] = a.id
	}
	return out
}

// publishAt sets published_at = at of ids, with MarkPublished.
func (o *outboxT) publishAt(at int64, ids ...int64) {
	o.t.Helper()
	args := []any{at}
	for _, id := range ids {
		args = append(args, id)
	}
	if n := o.exec("MarkPublished", o.s.MarkPublished(len(ids)), args...); n != int64(len(ids)) {
		o.t.Fatalf("OutboxSQL.MarkPublished affected %d rows, want %d", n, len(ids))
	}
}

// repairCopy runs RepairCopy of row orig at `at` (then LastInsertID, where it is
// set) and, when it wrote a copy, RecordRepair, in one transaction, as the audit
// does; it returns the copy's id, 0 when RepairCopy wrote nothing.
func (o *outboxT) repairCopy(orig, at int64, msgID, consumers string) (copyID int64) {
	o.t.Helper()
	if o.s.RepairCopy == "" || o.s.RecordRepair == "" {
		o.t.Fatal("OutboxSQL.RepairCopy or RecordRepair is empty")
	}
	field := "RepairCopy"
	err := o.db.InTx(o.ctx, func(tx *sql.Tx) error {
		q := o.db.Querier(tx)
		copyID = 0
		if o.s.LastInsertID != "" {
			n, err := q.Exec(o.ctx, o.s.RepairCopy, at, orig)
			if err != nil || n == 0 {
				return err
			}
			field = "RepairCopy (then LastInsertID)"
			if err := q.QueryRow(o.ctx, o.s.LastInsertID).Scan(&copyID); err != nil {
				return err
			}
		} else if err := q.QueryRow(o.ctx, o.s.RepairCopy, at, orig).Scan(&copyID); err != nil {
			if errors.Is(err, sql.ErrNoRows) {
				return nil
			}
			return err
		}
		field = "RecordRepair"
		_, err := q.Exec(o.ctx, o.s.RecordRepair, copyID, orig, msgID, "topic", consumers, "missing", at)
		return err
	})
	if err != nil {
		o.t.Fatalf("OutboxSQL.%s: %v", field, err)
	}
	return copyID
}

// audit: AuditPublished reads the published rows in keyset order, within its
// bounds, with the repairs' copies marked; RepairCopy copies a published row
// only; RecordRepair, RepairsOf and Repairs record and read the repairs.
func (o *outboxT) audit() {
	t := o.t
	const (
		t5  = now + 5
		t10 = now + 10
		t20 = now + 20
		t30 = now + 30
		t40 = now + 40
	)
	a, b, c := o.add("a", "k", 5, `{"h":"v"}`), o.add("b", "", 1, "{}"), o.add("c", "", 1, "{}")
	d, e, f := o.add("d", "", 1, "{}"), o.add("e", "", 1, "{}"), o.add("f", "", 1, "{}")
	pending, parked := o.add("pending", "", 1, "{}"), o.add("parked", "", 1, "{}")
	o.exec("Park", o.s.Park, now, "refused", parked)
	// a, b and c tie on published_at: the keyset's id breaks the tie. f was
	// published before the others, though written after them.
	o.publishAt(t10, c, a, b)
	o.publishAt(t20, d)
	o.publishAt(t30, e)
	o.publishAt(t5, f)

	all := o.auditPage(0, 0, math.MaxInt64, 100)
	if got, want := auditedIDs(all), []int64{f, a, b, c, d, e}; !slices.Equal(got, want) {
		t.Fatalf("OutboxSQL.AuditPublished of everything read rows %v, want %v: the published rows alone, by (published_at, id)", all, want)
	}
	for i, r := range all {
		msgID := []string{"f", "a", "b", "c", "d", "e"}[i]
		if r.msgID == nil || *r.msgID != msgID || r.topic == nil || *r.topic != "topic" || r.created != now || r.repairOf != nil ||
			r.published != map[string]int64{"f": t5, "a": t10, "b": t10, "c": t10, "d": t20, "e": t30}[msgID] {
			t.Fatalf("OutboxSQL.AuditPublished read %v for message %q: columns id, msg_id, topic, created_at, published_at, repair_of (NULL for a row no repair copied)", r, msgID)
		}
	}
	// Pages: after (t10, a), before t30: the ties after a, then d; not e
	// (published at until), not f (before the page's start).
	if got, want := auditedIDs(o.auditPage(t10, a, t30, 100)), []int64{b, c, d}; !slices.Equal(got, want) {
		t.Errorf("OutboxSQL.AuditPublished after (%d, %d) before %d read %v, want %v", t10, a, t30, got, want)
	}
	var paged []int64
	at, id := int64(0), int64(0)
	for range 10 {
		page := o.auditPage(at, id, t30, 2)
		if len(page) > 2 {
			t.Fatalf("OutboxSQL.AuditPublished with limit 2 read %d rows", len(page))
		}
		if len(page) == 0 {
			break
		}
		paged = append(paged, auditedIDs(page)...)
		at, id = page[len(page)-1].published, page[len(page)-1].id
	}
	if want := []int64{f, a, b, c, d}; !slices.Equal(paged, want) {
		t.Errorf("OutboxSQL.AuditPublished in pages of 2 before %d read %v, want %v", t30, paged, want)
	}
	if got := o.auditPage(t30, e, math.MaxInt64, 10); len(got) != 0 {
		t.Errorf("OutboxSQL.AuditPublished after the last row read %v", got)
	}
	o.auditLong(t40)

	// RepairCopy: a pending copy of a published row, as it is.
	copyA := o.repairCopy(a, now+50, "a", "c1,c2")
	if copyA == 0 || copyA == a {
		t.Fatalf("OutboxSQL.RepairCopy of published row %d returned id %d, want a new row's", a, copyA)
	}
	o.sameMessage(copyA, a, now+50)
	for _, id := range []int64{pending, parked, parked + 1000} {
		if got := o.repairCopy(id, now+50, "x", "c1"); got != 0 {
			t.Errorf("OutboxSQL.RepairCopy of row %d, not published, wrote row %d", id, got)
		}
	}
	if n := o.count("(the test's own read)", "SELECT COUNT(*) FROM idem_outbox WHERE id > $1", copyA); n != 0 {
		t.Errorf("OutboxSQL.RepairCopy of rows not published wrote %d rows", n)
	}
	o.publishAt(now+60, copyA)
	last := o.auditPage(t40, math.MaxInt64, math.MaxInt64, 10)
	if len(last) != 1 || last[0].id != copyA || last[0].repairOf == nil || *last[0].repairOf != a || last[0].msgID == nil || *last[0].msgID != "a" {
		t.Errorf("OutboxSQL.AuditPublished read the published copy of row %d as %v, want its repair_of %d", a, last, a)
	}
	copyA2 := o.repairCopy(a, now+70, "a", "c2")
	copyB := o.repairCopy(b, now+55, "b", "c1")
	if copyA2 <= copyA || copyB <= copyA2 {
		t.Fatalf("OutboxSQL.RepairCopy returned ids %d, %d, %d: want new rows' ids, rising", copyA, copyA2, copyB)
	}

	// RepairsOf: per original, its repairs' count and latest time.
	if o.s.RepairsOf == nil || o.s.Repairs == "" {
		t.Fatal("OutboxSQL.RepairsOf or Repairs is unset")
	}
	type prior struct{ orig, count, last int64 }
	repairsOf := func(ids ...int64) []prior {
		args := make([]any, len(ids))
		for i, id := range ids {
			args[i] = id
		}
		got := readRows(o, "RepairsOf", o.s.RepairsOf(len(ids)), args, func(rows idemsql.Rows) (p prior, err error) {
			return p, rows.Scan(&p.orig, &p.count, &p.last)
		})
		slices.SortFunc(got, func(x, y prior) int { return int(x.orig - y.orig) })
		return got
	}
	if got, want := repairsOf(d, a, b), []prior{{a, 2, now + 70}, {b, 1, now + 55}}; !slices.Equal(got, want) {
		t.Errorf("OutboxSQL.RepairsOf(3) read %v, want %v (orig_id, count, latest repaired_at; no row for an original without repairs)", got, want)
	}
	if got := repairsOf(c); len(got) != 0 {
		t.Errorf("OutboxSQL.RepairsOf(1) of a row never repaired read %v", got)
	}

	// Repairs: newest first, below a copy id.
	type repair struct {
		copyID, orig                    int64
		msgID, topic, consumers, reason string
		at                              int64
	}
	repairs := func(before int64, limit int) []repair {
		return readRows(o, "Repairs", o.s.Repairs, []any{before, limit}, func(rows idemsql.Rows) (r repair, err error) {
			return r, rows.Scan(&r.copyID, &r.orig, &r.msgID, &r.topic, &r.consumers, &r.reason, &r.at)
		})
	}
	want := []repair{{copyB, b, "b", "topic", "c1", "missing", now + 55}, {copyA2, a, "a", "topic", "c2", "missing", now + 70},
		{copyA, a, "a", "topic", "c1,c2", "missing", now + 50}}
	if got := repairs(math.MaxInt64, 10); !slices.Equal(got, want) {
		t.Errorf("OutboxSQL.Repairs read %+v, want %+v (copy_id, orig_id, msg_id, topic, consumers, reason, repaired_at; newest first)", got, want)
	}
	if got := repairs(copyB, 1); !slices.Equal(got, want[1:2]) {
		t.Errorf("OutboxSQL.Repairs below %d, limit 1, read %+v, want %+v", copyB, got, want[1:2])
	}
	if got := repairs(copyA, 10); len(got) != 0 {
		t.Errorf("OutboxSQL.Repairs below the first copy read %+v", got)
	}
}

// auditLong: AuditPublished reads a msg_id or topic longer than
// OutboxAuditMaxTextBytes as NULL, and one of that length whole, where the
// database can hold them (MySQL's VARCHAR(255) of utf8mb4 cannot). The rows are
// published at `at`, after the others.
func (o *outboxT) auditLong(at int64) {
	t := o.t
	max := idemsql.OutboxAuditMaxTextBytes
	long, edge := strings.Repeat("x", max+1), strings.Repeat("y", max)
	rows := [][2]string{{long, "topic"}, {"long-topic", long}, {edge, edge}}
	var ids []int64
	for _, r := range rows {
		var id int64
		err := o.db.InTx(o.ctx, func(tx *sql.Tx) error {
			q := o.db.Querier(tx)
			if _, err := q.Exec(o.ctx, o.s.Insert, r[0], r[1], "", 1, "{}", []byte("p"), now); err != nil {
				return err
			}
			return q.QueryRow(o.ctx, "SELECT MAX(id) FROM idem_outbox").Scan(&id)
		})
		if err != nil {
			t.Logf("OutboxSQL.AuditPublished: the database does not hold a msg_id or topic of %d bytes (%v): its bound is not checked", max, err)
			continue
		}
		ids = append(ids, id)
	}
	if len(ids) != len(rows) {
		return
	}
	o.publishAt(at, ids...)
	got := o.auditPage(at-1, math.MaxInt64, at+1, 10)
	if len(got) != 3 || got[0].id != ids[0] || got[0].msgID != nil || got[0].topic == nil || *got[0].topic != "topic" ||
		got[1].msgID == nil || *got[1].msgID != "long-topic" || got[1].topic != nil ||
		got[2].msgID == nil || *got[2].msgID != edge || got[2].topic == nil || *got[2].topic != edge {
		t.Errorf("OutboxSQL.AuditPublished read %v; want a msg_id or topic longer than %d bytes as NULL, and one of %d bytes whole", got, max, max)
	}
}

// sameMessage fails unless row copyID is the message of row orig, pending,
// created and available at `at`, its attempts 0.
func (o *outboxT) sameMessage(copyID, orig, at int64) {
	o.t.Helper()
	read := func(id int64) (s []any) {
		var (
			msgID, topic, key, headers string
			part, created, available   int64
			attempts                   int64
			payload                    []byte
			published, parked          *int64
		)
		o.scan("(the test's own read)", `SELECT msg_id, topic, ordering_key, part, headers, payload, created_at, available_at, attempts, published_at, parked_at
			FROM idem_outbox WHERE id = $1`, []any{id}, &msgID, &topic, &key, &part, &headers, &payload, &created, &available, &attempts, &published, &parked)
		return []any{msgID, topic, key, part, headers, string(payload), created, available, attempts, deref(published), deref(parked)}
	}
	got, want := read(copyID), read(orig)
	want[6], want[7], want[8], want[9], want[10] = at, at, int64(0), "NULL", "NULL"
	if fmt.Sprint(got) != fmt.Sprint(want) {
		o.t.Errorf("OutboxSQL.RepairCopy wrote row %d as %v, want %v (msg_id, topic, ordering_key, part, headers, payload of row %d; created_at and available_at %d; attempts 0; pending)",
			copyID, got, want, orig, at)
	}
}

// deadLettered: DeadLettered reads, of the message ids asked, those the
// consumer dead-lettered, open or closed, with the earliest dead_at; not another
// consumer's.
func (r inboxRunner) deadLettered() {
	if r.s.DeadLettered == nil {
		r.fatal("DeadLettered", "is nil")
	}
	ins := func(consumer, msgID string, deadAt int64) int64 {
		r.exec("InsertDeadLetter", r.s.InsertDeadLetter, consumer, msgID, "orders", "p-"+msgID, `{}`,
			[]byte("payload"), "permanent", "refused", 3, int64(1000), deadAt)
		var id int64
		r.row("(the test's own read)", "SELECT MAX(id) FROM idem_dead_letters", nil, &id)
		return id
	}
	closed := ins("c1", "m1", 2000)
	r.exec("CloseDeadLetter", r.s.CloseDeadLetter, int64(2500), closed)
	ins("c1", "m1", 3000) // open again, after the first was replayed
	ins("c1", "m2", 4000)
	ins("c1", "", 4500)
	ins("c2", "m3", 5000)
	ins("c2", "m1", 1000)
	type dead struct {
		msgID string
		at    int64
	}
	read := func(consumer string, ids ...string) []dead {
		args := []any{consumer}
		for _, id := range ids {
			args = append(args, id)
		}
		var out []dead
		r.rows("DeadLettered", r.s.DeadLettered(len(ids)), args, func(rows idemsql.Rows) error {
			var d dead
			out = append(out, d)
			return rows.Scan(&out[len(out)-1].msgID, &out[len(out)-1].at)
		})
		slices.SortFunc(out, func(a, b dead) int { return strings.Compare(a.msgID, b.msgID) })
		return out
	}
	if got, want := read("c1", "m3", "m1", "m2", "m9"), []dead{{"m1", 2000}, {"m2", 4000}}; !slices.Equal(got, want) {
		r.errorf("DeadLettered", "of c1 read %v, want %v (msg_id and the earliest dead_at of its letters, open or closed; not c2's m3)", got, want)
	}
	if got, want := read("c2", "m2"), []dead(nil); !slices.Equal(got, want) {
		r.errorf("DeadLettered", "of c2 read %v for c1's letter, want none", got)
	}
	if got, want := read("c2", "m1"), []dead{{"m1", 1000}}; !slices.Equal(got, want) {
		r.errorf("DeadLettered", "of c2 read %v, want %v", got, want)
	}
}

// testApplied: Applied reads, of the ids asked in one scope, those with a
// record, in progress or completed, with state and created; {{table}} stands
// for the table.
func (r *recordsBench[Tx]) testApplied(t *testing.T) {
	raw := r.db.Driver.Records()
	if raw.Applied == nil || r.q.Applied == nil {
		t.Fatal("RecordsSQL.Applied is nil")
	}
	if !strings.Contains(raw.Applied(2), "{{table}}") {
		t.Errorf("RecordsSQL.Applied(2) has no {{table}}: %s", raw.Applied(2))
	}
	ctx := ctxFor(t)
	type applied struct {
		id      string
		state   int64
		created int64 // µs
	}
	read := func(scope string, ids ...string) []applied {
		args := []any{scope}
		for _, id := range ids {
			args = append(args, id)
		}
		var out []applied
		err := r.db.Auto(ctx, func(q idemsql.Querier) error {
			return idemsql.EachRow(ctx, q, r.q.Applied(len(ids)), args, func(rows idemsql.Rows) error {
				var (
					a   applied
					at  time.Time
					n   int64
					err error
				)
				if r.q.TimeUnit == 0 {
					err = rows.Scan(&a.id, &a.state, &at)
				} else {
					err = rows.Scan(&a.id, &a.state, &n)
					at = time.Unix(0, n*int64(r.q.TimeUnit))
				}
				a.created = at.UnixMicro()
				out = append(out, a)
				return err
			})
		})
		if err != nil {
			t.Fatalf("RecordsSQL.Applied(%d): %v", len(ids), err)
		}
		slices.SortFunc(out, func(a, b applied) int { return strings.Compare(a.id, b.id) })
		return out
	}
	at := func(i int) int64 { return r.now.Add(seeds[i].created).UnixMicro() }
	want := []applied{{"k1", int64(idem.StateCompleted), at(0)}, {"k2", int64(idem.StateInProgress), at(1)}, {"k3", int64(idem.StateCompleted), at(2)}}
	if got := read("dt-a", "k9", "k3", "k2", "k1"); !slices.Equal(got, want) {
		t.Errorf("RecordsSQL.Applied of dt-a read %v, want %v (id, state, created; one row per id with a record)", got, want)
	}
	if got, want := read("dt-b", "k2", "k1"), []applied{{"k1", int64(idem.StateInProgress), at(3)}}; !slices.Equal(got, want) {
		t.Errorf("RecordsSQL.Applied of dt-b read %v, want %v (not dt-a's records)", got, want)
	}
	if got := read("dt-z", "k1"); len(got) != 0 {
		t.Errorf("RecordsSQL.Applied of a scope without records read %v", got)
	}
}
