package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/cmd/idem/internal/open"
	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/inbox"
	"github.com/idemhq/idem/internal/testsvc"
	"github.com/idemhq/idem/outbox"
)

// auditJSON is the part of idem audit --json the tests read.
type auditJSON struct {
	Rows []struct {
		Topic        string   `json:"topic"`
		Consumer     string   `json:"consumer"`
		Published    int64    `json:"published"`
		Applied      int64    `json:"applied"`
		DeadLettered int64    `json:"dead_lettered"`
		Missing      int64    `json:"missing"`
		InFlight     int64    `json:"in_flight"`
		Repairing    int64    `json:"repairing"`
		MissingIDs   []string `json:"missing_ids"`
	} `json:"rows"`
	Blind []struct {
		Consumer string `json:"consumer"`
	} `json:"blind"`
	Repaired []struct {
		CopyID int64  `json:"copy_id"`
		OrigID int64  `json:"orig_id"`
		MsgID  string `json:"msg_id"`
	} `json:"repaired"`
}

// lossyFlow seeds a flow on d as a broker that lost a message leaves it: four
// messages of topic orders enqueued and published by a real relay (m-1 … m-4);
// consumer billing, a real inbox.Consumer, got m-1 … m-3 (applied m-1 and m-2,
// dead-lettered m-3), never m-4. The outbox rows are then dated 10 minutes back,
// so that with a grace of 5 minutes m-4 is missing whatever the clocks.
func lossyFlow(t *testing.T, d opsDB) {
	t.Helper()
	ctx := context.Background()
	ob, err := outbox.New(ctx, d.db, outbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	var msgs []idem.Message
	for i := 1; i <= 4; i++ {
		msgs = append(msgs, idem.Message{ID: fmt.Sprintf("m-%d", i), Topic: "orders", Payload: []byte(fmt.Sprintf(`{"order":%d}`, i))})
	}
	if err := d.db.InTx(ctx, func(tx *sql.Tx) error { _, err := ob.EnqueueTx(ctx, tx, msgs...); return err }); err != nil {
		t.Fatal(err)
	}
	sink := &flakySink{}
	relay, err := ob.Relay(sink, outbox.RelayConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if n, err := relay.RunOnce(ctx); err != nil || n != 4 {
		t.Fatalf("relay published %d, %v; want 4", n, err)
	}
	// The broker loses m-4: the consumer gets the others.
	var got []idem.Message
	for _, m := range msgs {
		if m.ID != "m-4" {
			got = append(got, m)
		}
	}
	var mu sync.Mutex
	handled := map[string]bool{}
	h := func(ctx context.Context, tx *sql.Tx, m idem.Message) error {
		mu.Lock()
		handled[m.ID] = true
		mu.Unlock()
		if m.ID == "m-3" {
			return inbox.Permanent(errors.New("card declined"))
		}
		return nil
	}
	c, err := inbox.New(ctx, newListSource(got...), d.db, d.store, h, inbox.Config{Consumer: "billing"})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- c.Run(runCtx) }()
	// Wait for the consumer's progress: m-1 and m-2 keyed, m-3 dead-lettered.
	in := d.store.(idem.Inspector)
	deadline := time.Now().Add(time.Minute)
	for {
		dead := countRows(t, d, "SELECT COUNT(*) FROM idem_dead_letters")
		applied := 0
		for _, id := range []string{"m-1", "m-2"} {
			if r, err := in.Inspect(ctx, idem.Key{Scope: "billing", ID: id}); err == nil && r.State == idem.StateCompleted {
				applied++
			}
		}
		if dead == 1 && applied == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the consumer made no progress: %d dead letters, %d applied", dead, applied)
		}
		time.Sleep(20 * time.Millisecond)
	}
	stop()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("consumer Run = %v", err)
	}
	err = d.db.Auto(ctx, func(q idemsql.Querier) error {
		_, err := q.Exec(ctx, "UPDATE idem_outbox SET created_at = created_at - 600000, published_at = published_at - 600000")
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// decodeAudit parses idem audit --json's one document into v, which reads part
// of it.
func decodeAudit(t *testing.T, out string, v any) {
	t.Helper()
	if err := json.Unmarshal([]byte(out), v); err != nil {
		t.Fatalf("--json output %q: %v", out, err)
	}
}

// countRows runs a SELECT COUNT(*) without arguments on d.
func countRows(t *testing.T, d opsDB, query string) int64 {
	t.Helper()
	ctx := context.Background()
	var n int64
	err := d.db.Auto(ctx, func(q idemsql.Querier) error { return q.QueryRow(ctx, query).Scan(&n) })
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestAuditFindsAndRepairsMissing: on SQLite, PostgreSQL and MySQL, idem audit
// reports the message a broker lost as missing (exit 1, its id in the text and the
// JSON), the applied and dead-lettered ones as such; --repair republishes it once,
// as a copy the relay publishes under the same id (never the dead-lettered one);
// --repairs lists the copy; the next audit counts it in flight (exit 0).
func TestAuditFindsAndRepairsMissing(t *testing.T) {
	t.Parallel()
	forEachOpsDB(t, true, func(t *testing.T, d opsDB) {
		lossyFlow(t, d)
		base := []string{"audit", "--db", d.url, "--consumer", "billing=orders", "--grace", "5m"}

		out, stderr, code := runCode(t, append(base, "--json")...)
		if code != 1 || !strings.Contains(stderr, "1 messages missing (none repaired: --repair republishes them)") {
			t.Fatalf("audit exited %d, want 1:\n%s%s", code, out, stderr)
		}
		var rep auditJSON
		decodeAudit(t, out, &rep)
		if len(rep.Rows) != 1 {
			t.Fatalf("rows %+v", rep.Rows)
		}
		r := rep.Rows[0]
		if r.Topic != "orders" || r.Consumer != "billing" || r.Published != 4 || r.Applied != 2 || r.DeadLettered != 1 ||
			r.Missing != 1 || r.InFlight != 0 || len(r.MissingIDs) != 1 || r.MissingIDs[0] != "m-4" || len(rep.Repaired) != 0 {
			t.Fatalf("row %+v, want 4 published, 2 applied, 1 dead-lettered, m-4 missing", r)
		}

		text := wantCode(t, 1, "1 messages missing", base...)
		wantLines(t, text, "missing at billing (orders): m-4", "4 published, 2 applied once, 1 dead-lettered, 1 missing, 0 in flight")

		out, stderr, code = runCode(t, append(base, "--repair", "--json")...)
		if code != 1 || !strings.Contains(stderr, "1 republished by --repair") {
			t.Fatalf("audit --repair exited %d, want 1 saying what it republished:\n%s%s", code, out, stderr)
		}
		rep = auditJSON{}
		decodeAudit(t, out, &rep)
		if len(rep.Repaired) != 1 || rep.Repaired[0].MsgID != "m-4" || rep.Repaired[0].CopyID <= rep.Repaired[0].OrigID {
			t.Fatalf("repaired %+v, want one copy of m-4", rep.Repaired)
		}
		// The copy is a pending row of the outbox under the same id, which a relay
		// publishes; the dead-lettered m-3 was not copied.
		copies := countRows(t, d, "SELECT COUNT(*) FROM idem_outbox WHERE msg_id = 'm-4' AND published_at IS NULL")
		m3 := countRows(t, d, "SELECT COUNT(*) FROM idem_outbox WHERE msg_id = 'm-3'")
		if copies != 1 || m3 != 1 {
			t.Fatalf("%d pending copies of m-4 (want 1), %d rows of m-3 (want 1)", copies, m3)
		}
		var list struct {
			Repairs []struct {
				CopyID    int64    `json:"copy_id"`
				MsgID     string   `json:"msg_id"`
				Topic     string   `json:"topic"`
				Consumers []string `json:"consumers"`
				Reason    string   `json:"reason"`
				At        string   `json:"at"`
				OrigID    int64    `json:"orig_id"`
			} `json:"repairs"`
		}
		decode(t, mustRun(t, "audit", "--db", d.url, "--repairs", "--json"), &list)
		if len(list.Repairs) != 1 || list.Repairs[0].CopyID != rep.Repaired[0].CopyID || list.Repairs[0].MsgID != "m-4" ||
			len(list.Repairs[0].Consumers) != 1 || list.Repairs[0].Consumers[0] != "billing" {
			t.Fatalf("--repairs %+v", list.Repairs)
		}
		wantLines(t, mustRun(t, "audit", "--db", d.url, "--repairs"), "COPY", "m-4", "billing")

		// Repaired less than --grace ago: in flight, not missing; exit 0.
		out = mustRun(t, append(base, "--json")...)
		rep = auditJSON{}
		decodeAudit(t, out, &rep)
		if r := rep.Rows[0]; r.Missing != 0 || r.InFlight != 1 || r.Repairing != 1 || len(rep.Repaired) != 0 {
			t.Fatalf("after the repair: %+v, want m-4 in flight (repairing)", r)
		}
	})
}

// TestAuditConsumerElsewhere: a consumer whose keys are in another database
// (@sqlite:PATH) is read there; one that holds no key at all is reported blind,
// its messages never missing.
func TestAuditConsumerElsewhere(t *testing.T) {
	t.Parallel()
	consumer := newOpsDB(t, "sqlite")
	lossyFlow(t, consumer) // the consumer's keys and dead letters, and an outbox we do not audit
	producer := newOpsDB(t, "sqlite")
	lossyFlow(t, producer)
	out, stderr, code := runCode(t, "audit", "--db", producer.url, "--grace", "5m", "--json",
		"--consumer", "billing=orders@"+consumer.url, "--consumer", "mail=orders@"+consumer.url)
	var rep auditJSON
	decodeAudit(t, out, &rep)
	if code != 1 || len(rep.Rows) != 2 || rep.Rows[0].Applied != 2 || rep.Rows[0].Missing != 1 {
		t.Fatalf("exit %d, rows %+v\n%s", code, rep.Rows, stderr)
	}
	if len(rep.Blind) != 1 || rep.Blind[0].Consumer != "mail" || rep.Rows[1].Missing != 0 || rep.Rows[1].Published != 4 {
		t.Fatalf("blind %+v, mail row %+v: want mail blind, its 4 messages published only", rep.Blind, rep.Rows[1])
	}
}

// TestParseConsumer: --consumer splits at the first '=' and the last '@' that
// starts a database URL.
func TestParseConsumer(t *testing.T) {
	t.Parallel()
	db := filepath.Join(t.TempDir(), "c.db")
	if err := os.WriteFile(db, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		in, name, topics, db string
	}{
		{"billing=orders", "billing", "orders", ""},
		{"billing=orders, refunds", "billing", "orders,refunds", ""},
		{"billing=a@b,orders", "billing", "a@b,orders", ""},
		{"billing=orders@postgres://u:p%40ss@db.internal:5432/billing", "billing", "orders", "postgres://u:p%40ss@db.internal:5432/billing"},
		{"billing=x@y,orders@mysql://u@h:3306/b", "billing", "x@y,orders", "mysql://u@h:3306/b"},
		{"billing=orders@sqlite:" + db, "billing", "orders", "sqlite:" + db},
		{"b=c=orders", "b", "c=orders", ""},
	} {
		s, err := open.ParseConsumer(c.in)
		if err != nil || s.Name != c.name || strings.Join(s.Topics, ",") != c.topics || s.DB != c.db {
			t.Errorf("ParseConsumer(%q) = %+v, %v; want %s %s %s", c.in, s, err, c.name, c.topics, c.db)
		}
	}
}

// TestAuditBadFlags: each bad command line exits 2 naming the flag and the fix,
// never quoting a password.
func TestAuditBadFlags(t *testing.T) {
	t.Parallel()
	d := newOpsDB(t, "sqlite")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--consumer", "b=o"}, "--db is required"},
		{[]string{"--db", d.url}, "--consumer is required"},
		{[]string{"--db", d.url, "--consumer", "orders"}, "--consumer \"orders\": no consumer name: use NAME=TOPIC"},
		{[]string{"--db", d.url, "--consumer", "b="}, "an empty topic"},
		{[]string{"--db", d.url, "--consumer", "b=o,,p"}, "an empty topic"},
		{[]string{"--db", d.url, "--consumer", "b=o", "--consumer", "b=p"}, "--consumer b is given twice"},
		{[]string{"--db", d.url, "--consumer", "b=o@sqlite:/no/such.db"}, "--consumer b: @sqlite:PATH: no such file"},
		{[]string{"--db", d.url, "--consumer", "b=o@postgres://u:s3cret@h:5432/db/x@y"}, "--consumer"},
		{[]string{"--db", d.url, "--consumer", "b=o", "--max-repairs", "5"}, "--max-repairs without --repair"},
		{[]string{"--db", d.url, "--consumer", "b=o", "--grace", "2h"}, "--grace must be positive and shorter than --window"},
		{[]string{"--db", d.url, "--consumer", "b=o", "--window", "100h"}, "--window (100h0m0s) is more than half of --retention (168h0m0s)"},
		{[]string{"--db", d.url, "--consumer", "b=o", "--page-size", "5000"}, "--page-size must be 1 to 1000"},
		{[]string{"--db", d.url, "--consumer", "b=o", "--limit", "5"}, "--limit without --repairs"},
		{[]string{"--db", d.url, "--repairs", "--every", "1m"}, "--repairs lists the recorded repairs"},
		{[]string{"--db", d.url, "--consumer", "b=o", "--deliveries", "ftp://h/metrics"}, "--deliveries ftp://h/metrics: not an http"},
		{[]string{"--db", d.url, "--consumer", "b=o", "--records-table", "bad name;"}, "--records-table"},
		{[]string{"--db", "postgres://app:s3cret@db.internal/x@y", "--consumer", "b=o"}, "--db"},
		{[]string{"--db", d.url, "--consumer", "b=o", "--every", "-1m"}, "--every must be positive"},
	} {
		_, stderr, code := runCode(t, append([]string{"audit"}, c.args...)...)
		if code != 2 || !strings.Contains(stderr, c.want) || strings.Contains(stderr, "s3cret") {
			t.Errorf("idem audit %v: exit %d, stderr %q; want 2 saying %q", c.args, code, stderr, c.want)
		}
	}
}

// TestAuditEveryServesHealth: --every runs the audit in a loop, serves
// idem_audit_* on /metrics and /healthz, and stops on its context.
func TestAuditEveryServesHealth(t *testing.T) {
	t.Parallel()
	d := newOpsDB(t, "sqlite")
	lossyFlow(t, d)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addr := freeAddr(t)
	var out, errb testsvc.Buffer
	done := make(chan error, 1)
	go func() {
		done <- NewMain(&out, &errb).Run(ctx, []string{"audit", "--db", d.url, "--consumer", "billing=orders", "--grace", "5m",
			"--every", "1h", "--listen", addr})
	}()
	deadline := time.Now().Add(time.Minute)
	var metrics string
	for {
		metrics = httpGet(t, "http://"+addr+"/metrics")
		if strings.Contains(metrics, "idem_audit_last_success_timestamp_seconds") && strings.Contains(metrics, `state="missing"`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no audit run in /metrics:\n%s\nstderr:\n%s", metrics, errb.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	wantLines(t, metrics, `idem_audit_messages{consumer="billing",state="missing",topic="orders"} 1`,
		`idem_audit_messages{consumer="billing",state="applied",topic="orders"} 2`, "idem_audit_interval_seconds 3600")
	if h := httpGet(t, "http://"+addr+"/healthz"); !strings.HasPrefix(h, "ok") {
		t.Errorf("/healthz %q", h)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("audit --every returned %v\n%s", err, errb.String())
	}
	wantLines(t, errb.String(), "idem audit: run", "missing=1", "applied=2")
}

// httpGet returns the body of GET url, "" when it does not answer (yet).
func httpGet(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// TestAuditHealth: /healthz turns 503 when the last run failed or none succeeded
// within 3 intervals.
func TestAuditHealth(t *testing.T) {
	t.Parallel()
	h := &auditHealth{every: time.Minute, since: time.Now()}
	if ok, _ := h.check(context.Background()); !ok {
		t.Fatal("unhealthy at start")
	}
	h.done(errors.New("database down"))
	if ok, msg := h.check(context.Background()); ok || !strings.Contains(msg, "the last audit failed") {
		t.Fatalf("after a failed run: %v %q", ok, msg)
	}
	h.done(nil)
	if ok, _ := h.check(context.Background()); !ok {
		t.Fatal("unhealthy after a good run")
	}
	h.since = time.Now().Add(-4 * time.Minute)
	if ok, msg := h.check(context.Background()); ok || !strings.Contains(msg, "no audit succeeded") {
		t.Fatalf("4 intervals after the last success: %v %q", ok, msg)
	}
}

// TestAdminAuditArea: idem admin --consumer (parsed as idem audit parses it)
// serves the audit area over --db: GET /api/audit finds the lost message, and the
// audit's metrics are on its /metrics; --consumer without --db, or a bad one, is
// a usage error.
func TestAdminAuditArea(t *testing.T) {
	t.Parallel()
	d := newOpsDB(t, "sqlite")
	lossyFlow(t, d)
	dm, addrs := startDaemon(t, adminListeningRE, "admin", "--listen", "127.0.0.1:0", "--db", d.url,
		"--consumer", "billing=orders", "--audit-grace", "5m", "--token", testAdminToken, "--read-token", testReadToken)
	base := "http://" + addrs[0]
	code, body := apiGet(t, base+"/api/audit", testReadToken)
	var rep auditJSON
	decodeAudit(t, body, &rep)
	if code != 200 || len(rep.Rows) != 1 || rep.Rows[0].Missing != 1 || rep.Rows[0].MissingIDs[0] != "m-4" {
		t.Fatalf("GET /api/audit: %d %s", code, body)
	}
	if code, body := apiGet(t, base+"/metrics", ""); code != 200 || !strings.Contains(body, `idem_audit_messages{consumer="billing",state="missing",topic="orders"} 1`) {
		t.Fatalf("/metrics after an audit: %d\n%s", code, body)
	}
	dm.stop(t)

	wantCode(t, 2, "--consumer without --db", "admin", "--insecure", "--consumer", "billing=orders")
	wantCode(t, 2, "no consumer name", "admin", "--insecure", "--db", d.url, "--consumer", "billing")
}

// TestAuditDeliveries: --deliveries reads the consumers' /metrics, and the
// sentence says how many duplicate deliveries their inboxes suppressed; a source
// that does not answer leaves the audit standing, unmeasured.
func TestAuditDeliveries(t *testing.T) {
	t.Parallel()
	d := newOpsDB(t, "sqlite")
	lossyFlow(t, d)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "# TYPE idem_inbox_messages_total counter\n"+
			`idem_inbox_messages_total{consumer="billing",outcome="processed"} 98`+"\n"+
			`idem_inbox_messages_total{consumer="billing",outcome="duplicate"} 2`+"\n")
	}))
	defer srv.Close()
	out := wantCode(t, 1, "1 messages missing", "audit", "--db", d.url, "--consumer", "billing=orders", "--grace", "5m", "--deliveries", srv.URL+"/metrics")
	wantLines(t, out, "2 duplicate deliveries suppressed (2.00% of the consumer's deliveries since it started)")
	out, stderr, code := runCode(t, "audit", "--db", d.url, "--consumer", "billing=orders", "--grace", "5m", "--deliveries", "http://"+freeAddr(t)+"/metrics")
	if code != 1 || !strings.Contains(stderr, "reading the consumers' delivery counts") {
		t.Fatalf("exit %d, stderr:\n%s", code, stderr)
	}
	wantLines(t, out, "duplicate deliveries not measured")
}

// TestAuditUnreachableIsRedacted: a database that does not answer, the
// producer's or a consumer's, is an error (exit 1) that never quotes a password.
func TestAuditUnreachableIsRedacted(t *testing.T) {
	t.Parallel()
	d := newOpsDB(t, "sqlite")
	closed := "postgres://root:Secr3t@" + testsvc.ClosedAddr(t) + "/test?connect_timeout=2"
	for _, args := range [][]string{
		{"audit", "--db", closed, "--consumer", "billing=orders"},
		{"audit", "--db", d.url, "--consumer", "billing=orders@" + closed},
		{"audit", "--db", closed, "--repairs"},
	} {
		_, stderr, code := runCode(t, args...)
		if code != 1 || strings.Contains(stderr, "Secr3t") || stderr == "" {
			t.Errorf("%v: exit %d, stderr %q: want 1, without the password", args, code, stderr)
		}
	}
}
