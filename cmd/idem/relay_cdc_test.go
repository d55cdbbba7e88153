package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemnats"
	"github.com/idemhq/idem/idempg"
	"github.com/idemhq/idem/internal/pgcluster"
	"github.com/idemhq/idem/internal/testsvc"
	"github.com/idemhq/idem/outbox"
)

// logicalPostgres starts a private cluster with wal_level=logical for t.
func logicalPostgres(t *testing.T) string {
	t.Helper()
	c, err := pgcluster.Start(context.Background(), pgcluster.Options{})
	if err != nil {
		if testsvc.Required() {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	t.Cleanup(func() { c.Stop(context.Background()) })
	return c.URL
}

// cdcFixture is a private logical cluster with an outbox, and a JetStream stream
// of subject.>.
type cdcFixture struct {
	url             string
	pool            *pgxpool.Pool
	ob              *outbox.Outbox[pgx.Tx]
	js              jetstream.JetStream
	stream, subject string
}

func newCDCFixture(t *testing.T) *cdcFixture {
	t.Helper()
	ctx := context.Background()
	f := &cdcFixture{url: logicalPostgres(t)}
	var err error
	if f.pool, err = pgxpool.New(ctx, f.url); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.pool.Close)
	if f.ob, err = outbox.New(ctx, idempg.TxDB(f.pool), outbox.Config{}); err != nil {
		t.Fatal(err)
	}
	f.js = testsvc.JetStream(t, natsURL())
	f.stream, f.subject = testsvc.UniqueName("RELAYCDC_"), testsvc.UniqueName("relaycdc.")
	f.addStream(t, f.stream, f.subject)
	return f
}

// addStream creates stream of subject.>, deleted when t ends.
func (f *cdcFixture) addStream(t *testing.T, stream, subject string) {
	t.Helper()
	if _, err := idemnats.EnsureStream(context.Background(), f.js, idemnats.StreamConfig{Name: stream, Subjects: []string{subject + ".>"},
		Storage: jetstream.MemoryStorage}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.js.DeleteStream(context.Background(), stream) })
}

// enqueue commits msgs in one transaction.
func (f *cdcFixture) enqueue(t *testing.T, msgs ...idem.Message) {
	t.Helper()
	ctx := context.Background()
	if err := pgx.BeginFunc(ctx, f.pool, func(tx pgx.Tx) error {
		_, err := f.ob.EnqueueTx(ctx, tx, msgs...)
		return err
	}); err != nil {
		t.Fatal(err)
	}
}

// idem relay --cdc publishes from the WAL with position headers, serves its
// metrics and health, and --drop-slot drops the slot.
func TestRelayCDCToNATS(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newCDCFixture(t)
	url, pool, js, stream, subject := f.url, f.pool, f.js, f.stream, f.subject

	r := startRelay(t, "--cdc", "--db", url, "--sink", natsURL(), "--slot", "cli_slot")
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("relay output:\n%s", r.stderr)
		}
	})
	f.enqueue(t, msg(subject+".orders", "p1"), msg(subject+".orders", "p2"), msg(subject+".orders", "p3"))
	got := streamMessages(t, js, stream, 3)
	checkIDs(t, got, "p1", "p2", "p3")
	for i, m := range got {
		if m.Header.Get("idem-lsn") == "" || m.Header.Get("idem-lsn-index") != string(rune('0'+i)) || m.Header.Get("idem-source") != "postgres/cli_slot" {
			t.Fatalf("message %d headers %v", i, m.Header)
		}
	}
	// The relay marks what it published, so the audit sees the rows.
	testsvc.Eventually(t, 15*time.Second, "the published rows marked", func() bool {
		var n int
		return pool.QueryRow(ctx, "SELECT COUNT(*) FROM idem_outbox WHERE published_at IS NOT NULL").Scan(&n) == nil && n == 3
	})
	var body string
	testsvc.Eventually(t, 15*time.Second, "/metrics with the CDC series", func() bool {
		_, body = r.get(t, "/metrics")
		return strings.Contains(body, "idem_cdc_published_total 3\n") && strings.Contains(body, "idem_cdc_retained_wal_bytes") &&
			strings.Contains(body, "idem_cdc_lag_bytes") && strings.Contains(body, "idem_cdc_active 1\n")
	})
	testsvc.Eventually(t, 15*time.Second, "/healthz ok", func() bool {
		code, hb := r.get(t, "/healthz")
		return code == 200 && strings.HasPrefix(hb, "ok")
	})
	r.stop(t)

	var out, errb bytes.Buffer
	testsvc.Eventually(t, 30*time.Second, "--drop-slot", func() bool {
		out.Reset()
		errb.Reset()
		return NewMain(&out, &errb).Run(ctx, []string{"relay", "--cdc", "--drop-slot", "--db", url, "--slot", "cli_slot"}) == nil
	})
	if !strings.Contains(out.String(), "dropped replication slot cli_slot") {
		t.Fatalf("--drop-slot printed %q %q", out.String(), errb.String())
	}
	var n int
	pool.QueryRow(ctx, "SELECT COUNT(*) FROM pg_replication_slots").Scan(&n)
	if n != 0 {
		t.Fatalf("%d slots after --drop-slot", n)
	}
}

// --cdc refuses what it cannot read: another database, bad flags, and a server
// without wal_level=logical (the error names the setting).
func TestRelayCDCBadInput(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pg := func(more ...string) []string {
		return append([]string{"relay", "--cdc", "--db", "postgres://u@127.0.0.1:5432/x", "--sink", "nats://127.0.0.1:4222"}, more...)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"relay", "--cdc", "--sink", "nats://127.0.0.1:4222"}, "--cdc needs --db"},
		{[]string{"relay", "--cdc", "--db", "mysql://u@127.0.0.1:3306/x", "--sink", "nats://127.0.0.1:4222"}, "--db must be postgres"},
		{pg("--slot", "Bad-Name"), "Config.Slot"},
		{[]string{"relay", "--cdc", "--db", "postgres://u@127.0.0.1:5432/x"}, "--sink is required"},
		{pg("--max-attempts", "0"), "--max-attempts must be at least 1"},
		{pg("--stall-after", "0s"), "--stall-after must be positive"},
		{pg("--admin-token", "short"), "--admin-token is shorter"},
		{pg("--admin-token", testAdminToken, "--listen", ""), "--admin-token is set but --listen is empty"},
	} {
		var out, errb bytes.Buffer
		err := NewMain(&out, &errb).Run(ctx, tc.args)
		if err == nil || !strings.Contains(err.Error()+errb.String(), tc.want) {
			t.Errorf("%v = %v %q, want %q", tc.args, err, errb.String(), tc.want)
		}
	}
	// The shared server runs with wal_level=replica; the relay opens its sink first.
	testsvc.ReachURL(t, "postgres", testsvc.PostgresURL())
	testsvc.ReachURL(t, "nats", natsURL())
	var out, errb bytes.Buffer
	err := NewMain(&out, &errb).Run(ctx, []string{"relay", "--cdc", "--db", testsvc.PostgresURL(), "--sink", natsURL(), "--listen", ""})
	if err == nil || !strings.Contains(err.Error(), "wal_level") || strings.Contains(err.Error(), "postgres@") {
		t.Fatalf("relay --cdc on a replica-level server = %v", err)
	}
}

// idem relay --cdc parks a message the sink refuses and goes on; --admin-token
// serves the outbox's area, which lists it; /healthz answers 503 while a message
// waits with none published for --stall-after, and 200 again once it went out.
func TestRelayCDCParksAndTellsHealth(t *testing.T) {
	t.Parallel()
	f := newCDCFixture(t)
	r := startRelay(t, "--cdc", "--db", f.url, "--sink", natsURL(), "--slot", "cli_slot", "--admin-token", testAdminToken,
		"--max-attempts", "2", "--stall-after", "300ms")
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("relay output:\n%s", r.stderr)
		}
	})
	base := "http://" + r.addr
	if code, body := apiGet(t, base+"/api/outbox", testAdminToken); code != 200 {
		t.Fatalf("/api/outbox = %d %s, want the outbox's status", code, body)
	}
	if code, _ := apiGet(t, base+"/api/outbox", ""); code != 401 {
		t.Fatalf("/api/outbox without the token = %d, want 401", code)
	}
	bad := msg(f.subject+".orders", "crlf")
	bad.Headers = map[string]string{"x": "a\r\nb"} // NATS refuses a line break in a header
	f.enqueue(t, msg(f.subject+".orders", "p1"), bad, msg(f.subject+".orders", "p2"))
	checkIDs(t, streamMessages(t, f.js, f.stream, 2), "p1", "p2")
	var body string
	testsvc.Eventually(t, time.Minute, "the parked message listed by the admin API", func() bool {
		var code int
		code, body = apiGet(t, base+"/api/outbox/parked", testAdminToken)
		return code == 200 && strings.Contains(body, `"message_id":"crlf"`)
	})
	if !strings.Contains(body, "line break") || !strings.Contains(body, "cdc relay: message 1 of the transaction committed at") {
		t.Fatalf("/api/outbox/parked = %s, want the reason and the place", body)
	}
	testsvc.Eventually(t, time.Minute, "/healthz 200 with the parked count", func() bool {
		code, hb := r.get(t, "/healthz")
		return code == 200 && strings.Contains(hb, "messages parked since the start: 1")
	})

	// No stream holds this subject: the message waits, nothing is published.
	other := testsvc.UniqueName("relaycdc.")
	f.enqueue(t, msg(other+".orders", "waits"))
	var hb string
	testsvc.Eventually(t, time.Minute, "/healthz 503 with the sink's failure in idem's words", func() bool {
		var code int
		code, hb = r.get(t, "/healthz")
		return code == 503 && strings.Contains(hb, "messages wait and none was published") && strings.Contains(hb, "no responders")
	})
	f.addStream(t, testsvc.UniqueName("RELAYCDC_"), other)
	testsvc.Eventually(t, time.Minute, "/healthz 200 once the message went out", func() bool {
		code, _ := r.get(t, "/healthz")
		return code == 200
	})
	r.stop(t)
}
