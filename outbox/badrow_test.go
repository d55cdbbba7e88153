package outbox_test

import (
	"context"
	"database/sql"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/stdlib"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idempg"
	"github.com/idemhq/idem/idemtest"
	"github.com/idemhq/idem/internal/testsvc"
	"github.com/idemhq/idem/outbox"
)

// handRow is a row another team's service writes into idem_outbox by hand, with
// raw SQL. bad names the column whose error parks it; "" for a row the relay must
// publish.
type handRow struct {
	id, topic, key string
	part           any // nil: the documented hash
	headers        string
	payload        any
	availableAt    any // nil: now
	createdAt      any // nil: now
	bad            string
}

// handRows are written in this order: good rows before and after the bad ones, on
// several topics and partitions; a good row of key k1 behind a bad one of k1.
func handRows(dialect string) []handRow {
	now := time.Now().UnixMilli()
	rows := []handRow{
		{id: "before", topic: "orders"},
		{id: "bad-not-json", topic: "orders", key: "k1", headers: "not json", bad: "headers"},
		{id: "after-k1", topic: "orders", key: "k1"},
		{id: "bad-number-header", topic: "payments", headers: `{"n":1}`, bad: "headers"},
		{id: "", topic: "orders", bad: "msg_id"},
		{id: "bad-empty-topic", topic: "", bad: "topic"},
		{id: "bad-part-99", topic: "orders", part: 99, bad: "part"},
		{id: "bad-part-negative", topic: "orders", part: -5, bad: "part"},
		{id: "bad\x01control", topic: "orders", bad: "msg_id"},
		{id: "bad-huge-payload", topic: "orders", bad: "payload"}, // made huge by growPayload
		{id: "odd-traceparent", topic: "orders", headers: `{"traceparent":"00-not-a-trace","tracestate":"=="}`},
		{id: "microseconds", topic: "payments", availableAt: now * 1000, createdAt: now * 1000},
		{id: "after", topic: "payments"},
	}
	if dialect == "sqlite" { // SQLite keeps whatever type it is given
		rows = append(rows,
			handRow{id: "bad-text-created", topic: "orders", createdAt: "yesterday", bad: "created_at"},
			handRow{id: "bad-text-part", topic: "orders", part: "p", bad: "part"},
			handRow{id: "integer-payload", topic: "orders", payload: 42},
		)
	}
	return rows
}

// growPayload makes bad-huge-payload's payload one byte over idem.MaxPayload, on
// the server: MariaDB's default max_allowed_packet refuses such an insert.
var growPayload = map[string]string{
	"postgres": `UPDATE idem_outbox SET payload = decode(repeat('x', $1), 'escape') WHERE msg_id = 'bad-huge-payload'`,
	"mysql":    `UPDATE idem_outbox SET payload = REPEAT('x', $1) WHERE msg_id = 'bad-huge-payload'`,
	"sqlite":   `UPDATE idem_outbox SET payload = zeroblob($1) WHERE msg_id = 'bad-huge-payload'`,
}

func insertHandRows(t *testing.T, dialect string, db *sql.DB, rows []handRow) {
	t.Helper()
	now := time.Now().UnixMilli()
	for _, w := range rows {
		p := w.part
		if p == nil {
			p = part(w.key)
			if w.key == "" {
				p = part(w.id)
			}
		}
		headers, payload, created, available := w.headers, w.payload, w.createdAt, w.availableAt
		if headers == "" {
			headers = "{}"
		}
		if payload == nil {
			payload = []byte("payload of " + w.id)
		}
		if created == nil {
			created = now
		}
		if available == nil {
			available = created
		}
		if _, err := db.Exec(`INSERT INTO idem_outbox (msg_id, topic, ordering_key, part, headers, payload, created_at, available_at)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`, w.id, w.topic, w.key, p, headers, payload, created, available); err != nil {
			t.Fatalf("insert %q by hand: %v", w.id, err)
		}
	}
	if _, err := db.Exec(growPayload[dialect], idem.MaxPayload+1); err != nil {
		t.Fatalf("grow a payload: %v", err)
	}
}

// TestBadRowsAreParkedAlone: rows written by hand whose headers are not a JSON
// object of strings, whose msg_id, topic or part break the contract, whose payload
// is too large, or (SQLite) whose columns hold the wrong type, each fail alone: an
// attempt counted, idem_relay_failures_total counting it, parked after MaxAttempts
// with the decode error naming the column; the rows around them, before and after,
// on every topic, are published once; the row behind a bad one of its ordering key
// waits until it is parked; no round fails. On every database the relay runs on,
// through database/sql and (PostgreSQL) pgx.
func TestBadRowsAreParkedAlone(t *testing.T) {
	t.Parallel()
	forEachDB(t, func(t *testing.T, e env) { relayBadRows(t, e.name, e.db, e.ob) })
	t.Run("postgres-pgx", func(t *testing.T) {
		t.Parallel()
		pool := testsvc.PostgresPool(t)
		db := stdlib.OpenDBFromPool(pool) // the rows written by hand, on the same schema
		t.Cleanup(func() { db.Close() })
		ob, err := outbox.New(context.Background(), idempg.TxDB(pool), outbox.Config{})
		if err != nil {
			t.Fatal(err)
		}
		relayBadRows(t, "postgres", db, ob)
	})
}

func relayBadRows[Tx any](t *testing.T, dialect string, db *sql.DB, ob *outbox.Outbox[Tx]) {
	ctx := context.Background()
	rows := handRows(dialect)
	insertHandRows(t, dialect, db, rows)
	const maxAttempts = 3
	sink := &memSink{}
	reg := prometheus.NewRegistry()
	r, err := ob.Relay(sink, outbox.RelayConfig{BatchSize: 4, MaxAttempts: maxAttempts, Registerer: reg,
		Backoff: func(int) time.Duration { return time.Hour }, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	waiting := func() (n int) {
		t.Helper()
		if err := db.QueryRow("SELECT COUNT(*) FROM idem_outbox WHERE published_at IS NULL AND parked_at IS NULL").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	for round := 0; waiting() > 0; round++ {
		if round == 500 {
			t.Fatalf("%d rows still wait after 500 rounds", waiting())
		}
		if _, err := r.RunOnce(ctx); err != nil {
			t.Fatalf("RunOnce (round %d): %v", round, err)
		}
		// The backoff is cut short here, as the relay's own would end.
		if _, err := db.Exec("UPDATE idem_outbox SET available_at = 0 WHERE attempts > 0 AND parked_at IS NULL"); err != nil {
			t.Fatal(err)
		}
	}

	var good []string
	bad := 0
	for _, w := range rows {
		if w.bad == "" {
			good = append(good, w.id)
			continue
		}
		bad++
		var attempts int
		var lastError string
		var parked *int64
		if err := db.QueryRow("SELECT attempts, last_error, parked_at FROM idem_outbox WHERE msg_id = $1 AND topic = $2",
			w.id, w.topic).Scan(&attempts, &lastError, &parked); err != nil {
			t.Fatalf("row %q: %v", w.id, err)
		}
		if parked == nil || attempts != maxAttempts || !strings.Contains(lastError, w.bad) {
			t.Errorf("row %q: parked %v after %d attempts, last_error %q; want parked after %d attempts with an error naming %s",
				w.id, parked != nil, attempts, lastError, maxAttempts, w.bad)
		}
	}
	got := sink.ids()
	for _, id := range good {
		if n := strings.Count(","+strings.Join(got, ",")+",", ","+id+","); n != 1 {
			t.Errorf("%q published %d times, want once (published: %v)", id, n, got)
		}
	}
	if len(got) != len(good) {
		t.Errorf("published %v, want exactly %v", got, good)
	}
	for _, m := range sink.got {
		if m.ID == "integer-payload" && string(m.Payload) != "42" {
			t.Errorf("integer-payload published %q, want 42", m.Payload)
		}
	}
	// after-k1 waited behind bad-not-json, its key's earlier message, until that one
	// was parked.
	var parkedAt, publishedAt int64
	if err := db.QueryRow(`SELECT b.parked_at, a.published_at FROM idem_outbox b, idem_outbox a
		WHERE b.msg_id = 'bad-not-json' AND a.msg_id = 'after-k1'`).Scan(&parkedAt, &publishedAt); err != nil {
		t.Fatal(err)
	}
	if publishedAt < parkedAt {
		t.Errorf("after-k1 published at %d, before bad-not-json of its key was parked at %d", publishedAt, parkedAt)
	}
	if got, want := idemtest.MetricValue(t, reg, "idem_relay_failures_total", nil), float64(bad*maxAttempts); got != want {
		t.Errorf("idem_relay_failures_total = %v, want %v (%d bad rows × %d attempts)", got, want, bad, maxAttempts)
	}
	if got := idemtest.MetricValue(t, reg, "idem_relay_round_failures_total", nil); got != 0 {
		t.Errorf("idem_relay_round_failures_total = %v, want 0: a row's content never fails a round", got)
	}
	if got := idemtest.MetricValue(t, reg, "idem_outbox_parked", nil); got != float64(bad) {
		t.Errorf("idem_outbox_parked = %v, want %d", got, bad)
	}
}

// A broker or receiver whose error holds a NUL byte, invalid UTF-8 or pages of
// text (a webhook receiver's error page) is recorded as the message's last error,
// cleaned and cut to 4 KiB: PostgreSQL and MySQL refuse such text, and the round
// that records it would fail, every time.
func TestSinkErrorTextIsStored(t *testing.T) {
	t.Parallel()
	forEachDB(t, func(t *testing.T, e env) {
		ctx := context.Background()
		if err := placeOrder(ctx, e, "o1", "", true); err != nil {
			t.Fatal(err)
		}
		text := "receiver said \x00\xff" + strings.Repeat("x", 10_000)
		sink := &memSink{fail: func(idem.Message) error { return errors.New(text) }}
		r, err := e.ob.Relay(sink, outbox.RelayConfig{Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := r.RunOnce(ctx); err != nil {
			t.Fatalf("RunOnce: %v", err)
		}
		var attempts int
		var lastError string
		if err := e.db.QueryRow("SELECT attempts, last_error FROM idem_outbox WHERE msg_id = 'o1'").Scan(&attempts, &lastError); err != nil {
			t.Fatal(err)
		}
		if attempts != 1 || !strings.HasPrefix(lastError, "receiver said \uFFFD\uFFFDxxx") || len(lastError) > 4096 {
			t.Fatalf("attempts %d, last_error %q (%d bytes); want 1 and the text cleaned, at most 4096 bytes", attempts, lastError[:min(len(lastError), 40)], len(lastError))
		}
	})
}
