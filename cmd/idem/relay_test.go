package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/cmd/idem/internal/cli"
	"github.com/idemhq/idem/cmd/idem/internal/open"
	"github.com/idemhq/idem/idemmysql"
	"github.com/idemhq/idem/idemnats"
	"github.com/idemhq/idem/idemnats/natsserver"
	"github.com/idemhq/idem/idempg"
	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/internal/testsvc"
	"github.com/idemhq/idem/outbox"
)

// runningRelay is `idem relay` running in a goroutine.
type runningRelay struct {
	*daemon
	addr string // of /metrics and /healthz
}

var listeningRE = regexp.MustCompile(`idem relay: listening on (\S+)`)

// startRelay runs `idem relay args… --listen 127.0.0.1:0` and returns once it serves HTTP.
func startRelay(t *testing.T, args ...string) *runningRelay {
	t.Helper()
	d, addrs := startDaemon(t, listeningRE, append([]string{"relay", "--listen", "127.0.0.1:0"}, args...)...)
	return &runningRelay{daemon: d, addr: addrs[0]}
}

func (r *runningRelay) get(t *testing.T, path string) (int, string) {
	t.Helper()
	resp, err := http.Get("http://" + r.addr + path)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// checkHTTP asserts /healthz is 200 and /metrics reports want publications.
func (r *runningRelay) checkHTTP(t *testing.T, want int) {
	t.Helper()
	// Healthy means a ping or publication within three poll intervals: on a loaded
	// machine one may come late, so the test waits for health rather than timing it.
	var code int
	var hb string
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if code, hb = r.get(t, "/healthz"); code == http.StatusOK && strings.HasPrefix(hb, "ok") {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("/healthz = %d %q for 10s, want 200 ok", code, hb)
			break
		}
	}
	line := fmt.Sprintf("idem_relay_published_total %d\n", want)
	var body string
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if _, body = r.get(t, "/metrics"); strings.Contains(body, line) {
			return
		}
	}
	t.Errorf("/metrics lacks %q:\n%s", line, body)
}

// streamMessages waits until stream holds n messages and returns them in order.
func streamMessages(t *testing.T, js jetstream.JetStream, stream string, n int) []*jetstream.RawStreamMsg {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	for {
		st, err := js.Stream(ctx, stream)
		if err == nil {
			var info *jetstream.StreamInfo
			if info, err = st.Info(ctx); err == nil && info.State.Msgs >= uint64(n) {
				out := make([]*jetstream.RawStreamMsg, 0, n)
				for seq := info.State.FirstSeq; seq <= info.State.LastSeq; seq++ {
					m, err := st.GetMsg(ctx, seq)
					if err != nil {
						t.Fatalf("GetMsg %d: %v", seq, err)
					}
					out = append(out, m)
				}
				return out
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("stream %s did not receive %d messages: %v", stream, n, err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func checkIDs(t *testing.T, got []*jetstream.RawStreamMsg, want ...string) {
	t.Helper()
	ids := make([]string, len(got))
	for i, m := range got {
		ids[i] = m.Header.Get(nats.MsgIdHdr)
	}
	if strings.Join(ids, ",") != strings.Join(want, ",") {
		t.Fatalf("stream holds %v, want %v", ids, want)
	}
}

func msg(subject, id string) idem.Message {
	return idem.Message{ID: id, Topic: subject, Payload: []byte("payload of " + id)}
}

// sqliteOutbox creates a service's SQLite database with an outbox, and returns its
// path, the database, and a function that enqueues messages to topic in one tx.
func sqliteOutbox(t *testing.T, topic string) (string, *sql.DB, func(ids ...string)) {
	t.Helper()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "app.db")
	db, err := open.SQLite(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	txdb, err := idemsql.SQLDB(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	ob, err := outbox.New(ctx, txdb, outbox.Config{})
	if err != nil {
		t.Fatalf("outbox.New: %v", err)
	}
	return path, db, func(ids ...string) {
		t.Helper()
		err := txdb.InTx(ctx, func(tx *sql.Tx) error {
			for _, id := range ids {
				if _, err := ob.EnqueueTx(ctx, tx, msg(topic, id)); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatalf("enqueue: %v", err)
		}
	}
}

// A service on SQLite, the relay publishing to the embedded NATS server; one row is
// written by hand, as a service in another language would, following --schema.
func TestRelaySQLiteToNATS(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv, err := natsserver.StartServer(natsserver.ServerConfig{Dir: t.TempDir()})
	if err != nil {
		t.Fatalf("StartServer: %v", err)
	}
	t.Cleanup(srv.Shutdown)
	stream, subject := testsvc.UniqueName("RELAYTEST_"), testsvc.UniqueName("relaytest.")
	path, db, enqueue := sqliteOutbox(t, subject+".orders")
	enqueue("a", "b")
	h := fnv.New32a()
	h.Write([]byte("by-hand"))
	now := time.Now().UnixMilli()
	if _, err := db.ExecContext(ctx, `INSERT INTO idem_outbox (msg_id, topic, ordering_key, part, headers, payload, created_at, available_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $7)`, "by-hand", subject+".orders", "", h.Sum32()%64, `{"k":"v"}`, []byte("raw"), now); err != nil {
		t.Fatalf("insert by the contract: %v", err)
	}

	r := startRelay(t, "--db", "sqlite:"+path, "--sink", srv.ClientURL(),
		"--nats-stream", stream, "--nats-subjects", subject+".>", "--poll", "50ms")
	enqueue("c")

	got := streamMessages(t, testsvc.JetStream(t, srv.ClientURL()), stream, 4)
	checkIDs(t, got, "a", "b", "by-hand", "c")
	if string(got[2].Data) != "raw" || got[2].Header.Get("k") != "v" {
		t.Errorf("hand-written row arrived as %q with headers %v", got[2].Data, got[2].Header)
	}
	r.checkHTTP(t, 4)
	r.stop(t)
}

func natsURL() string { return cli.EnvOr("IDEM_TEST_NATS_URL", "nats://127.0.0.1:4222") }

// postgresOutbox opens a pool on the postgres:// URL cs and the outbox in it: the
// service's side.
func postgresOutbox(t *testing.T, cs string) (*pgxpool.Pool, *outbox.Outbox[pgx.Tx]) {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), cs)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	ob, err := outbox.New(context.Background(), idempg.TxDB(pool), outbox.Config{})
	if err != nil {
		t.Fatalf("outbox.New: %v", err)
	}
	return pool, ob
}

// natsTestStream creates a stream in memory on the test NATS server over the
// subjects under a fresh subject, deleted when t ends.
func natsTestStream(t *testing.T) (js jetstream.JetStream, stream, subject string) {
	t.Helper()
	js = testsvc.JetStream(t, natsURL())
	stream, subject = testsvc.UniqueName("RELAYTEST_"), testsvc.UniqueName("relaytest.")
	if _, err := idemnats.EnsureStream(context.Background(), js, idemnats.StreamConfig{Name: stream, Subjects: []string{subject + ".>"},
		Storage: jetstream.MemoryStorage}); err != nil {
		t.Fatalf("EnsureStream: %v", err)
	}
	t.Cleanup(func() { _ = js.DeleteStream(context.Background(), stream) })
	return js, stream, subject
}

// A service on Postgres, the relay publishing to a NATS server. The poll interval is
// long, so the messages arriving at once shows the relay was woken by NOTIFY.
func TestRelayPostgresToNATS(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cs, _ := testsvc.PostgresSchema(t)
	pool, ob := postgresOutbox(t, cs)
	js, stream, subject := natsTestStream(t)

	// Batches of 2, one a round: the third message needs a second round.
	r := startRelay(t, "--db", cs, "--sink", natsURL(), "--poll", "1m", "--batch", "2", "--round-batches", "1")
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, err := ob.EnqueueTx(ctx, tx, msg(subject+".orders", "p1"), msg(subject+".orders", "p2"), msg(subject+".orders", "p3"))
		return err
	})
	if err != nil {
		t.Fatalf("enqueue: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("relay output:\n%s", r.stderr)
		}
	})
	checkIDs(t, streamMessages(t, js, stream, 3), "p1", "p2", "p3")
	r.checkHTTP(t, 3)
	r.stop(t)
}

// A service on MySQL enqueues in its own transactions, and writes one row by hand
// with ? placeholders, as --schema tells a service in another language; the relay,
// another process as far as the service knows (no in-process wake-up), polls and
// publishes each message once. (Messages without an ordering key are ordered only
// within their partition, so the test does not compare orders.)
func TestRelayMySQLToNATS(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dbURL := testsvc.MySQLDatabase(t)
	db := testsvc.OpenMySQL(t, dbURL)
	txdb := idemmysql.TxDB(db)
	ob, err := outbox.New(ctx, txdb, outbox.Config{})
	if err != nil {
		t.Fatalf("outbox.New: %v", err)
	}
	js := testsvc.JetStream(t, natsURL())
	stream, subject := testsvc.UniqueName("RELAYTEST_"), testsvc.UniqueName("relaytest.")
	enqueue := func(ids ...string) {
		t.Helper()
		err := txdb.InTx(ctx, func(tx *sql.Tx) error {
			for _, id := range ids {
				if _, err := ob.EnqueueTx(ctx, tx, msg(subject+".orders", id)); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatalf("enqueue: %v", err)
		}
	}
	enqueue("m1", "m2")

	r := startRelay(t, "--db", dbURL, "--sink", natsURL(), "--nats-stream", stream, "--nats-subjects", subject+".>", "--poll", "50ms")
	t.Cleanup(func() { _ = js.DeleteStream(context.Background(), stream) })
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("relay output:\n%s", r.stderr)
		}
	})
	once := func(got []*jetstream.RawStreamMsg, want ...string) {
		t.Helper()
		ids := map[string]int{}
		for _, m := range got {
			ids[m.Header.Get(nats.MsgIdHdr)]++
		}
		for _, id := range want {
			if ids[id] != 1 {
				t.Errorf("%s published %d times, want once (stream: %v)", id, ids[id], ids)
			}
		}
		if len(got) != len(want) {
			t.Errorf("stream holds %d messages, want %d", len(got), len(want))
		}
	}
	once(streamMessages(t, js, stream, 2), "m1", "m2")
	h := fnv.New32a()
	h.Write([]byte("by-hand"))
	now := time.Now().UnixMilli()
	if _, err := db.ExecContext(ctx, `INSERT INTO idem_outbox (msg_id, topic, ordering_key, part, headers, payload, created_at, available_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?)`, "by-hand", subject+".orders", "", h.Sum32()%64, `{"k":"v"}`, []byte("raw"), now, now); err != nil {
		t.Fatalf("insert by the contract: %v", err)
	}
	enqueue("m3", "m4")
	once(streamMessages(t, js, stream, 5), "m1", "m2", "by-hand", "m3", "m4")
	r.checkHTTP(t, 5)
	r.stop(t)
}

// Flag errors exit with cli.ErrUsage (exit status 2) and name the flag and the fix.
func TestRelayFlagErrors(t *testing.T) {
	for _, env := range []string{"IDEM_DB", "IDEM_SINK", "IDEM_WEBHOOK_SECRET"} {
		t.Setenv(env, "")
	}
	file := filepath.Join(t.TempDir(), "app.db")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	db, sink := "sqlite:"+file, "nats://127.0.0.1:4222"
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--sink", sink}, "--db is required"},
		{[]string{"--db", db}, "--sink is required"},
		{[]string{"--db", "oracle://h/db", "--sink", sink}, "--db \"oracle://h/db\": unknown database; use postgres://user@host:5432/db, mysql://"},
		{[]string{"--db", "mysql://h", "--sink", sink}, "names no database: end the URL with the database"},
		{[]string{"--db", "mysql://h/db?timeout=soon", "--sink", sink}, "--db mysql://h/db?timeout=soon: idem: url has a bad parameter"},
		{[]string{"--db", "sqlite:", "--sink", sink}, "--db sqlite: needs the path"},
		{[]string{"--db", "sqlite:" + file + ".missing", "--sink", sink}, "pass the SQLite file"},
		{[]string{"--db", "postgres://u@h:notaport/db", "--sink", sink}, "--db"},
		{[]string{"--db", db, "--sink", "ftp://h"}, "unknown sink"},
		{[]string{"--db", db, "--sink", "kafka://nohostport"}, "kafka://host:9092"},
		{[]string{"--db", db, "--sink", "pubsub://"}, "no project ID: use pubsub://PROJECT"},
		{[]string{"--db", db, "--sink", "pubsub://me:secret@proj"}, "credentials in a pubsub:// URL"},
		{[]string{"--db", db, "--sink", "pubsub://proj/orders"}, "a path or query is not supported"},
		{[]string{"--db", db, "--sink", "https://example.com/hook"}, "IDEM_WEBHOOK_SECRET"},
		{[]string{"--db", db, "--sink", "https://", "--webhook-secret", strings.Repeat("s", 32)}, "WebhookConfig.URL"},
		{[]string{"--db", db, "--sink", "https://example.com/hook", "--webhook-secret", "s"}, "openssl rand -hex 32"},
		{[]string{"--db", db, "--sink", sink, "--nats-subjects", "a.>"}, "--nats-subjects needs --nats-stream"},
		{[]string{"--db", db, "--sink", "redis://h:6379", "--nats-stream", "S"}, "--nats-stream applies to nats://"},
		{[]string{"--db", db, "--sink", "redis://h:6379", "--redis-dedup", "-1s"}, "--redis-dedup -1s: want 0 (append every publish) to 24h0m0s"},
		{[]string{"--db", db, "--sink", "redis://h:6379", "--redis-dedup", "25h"}, "--redis-dedup 25h0m0s: want 0"},
		{[]string{"--db", db, "--sink", sink, "--batch", "0"}, "--batch must be 1 to 10000"},
		{[]string{"--db", db, "--sink", sink, "--round-batches", "0"}, "--round-batches must be 1 to 1000"},
		{[]string{"--db", db, "--sink", sink, "--round-batches", "1001"}, "--round-batches must be 1 to 1000"},
		{[]string{"--db", db, "--sink", sink, "--poll", "0s"}, "--poll must be positive"},
		{[]string{"--db", db, "--sink", sink, "--max-attempts", "0"}, "--max-attempts must be at least 1"},
		{[]string{"--db", db, "--sink", sink, "--retention", "-1h"}, "--retention must be positive"},
		{[]string{"--db", db, "--sink", sink, "--stall-after", "0s"}, "--stall-after must be positive"},
		{[]string{"--db", db, "--sink", sink, "--frobnicate"}, "-frobnicate"},
		{[]string{"--db", db, "--sink", sink, "extra"}, `unexpected argument "extra"`},
	} {
		_, stderr, err := run(t, append([]string{"relay"}, c.args...)...)
		if !errors.Is(err, cli.ErrUsage) || !strings.Contains(stderr, c.want) {
			t.Errorf("relay %v: err %v, stderr %q; want cli.ErrUsage and %q", c.args, err, stderr, c.want)
		}
	}
}

// The tuning flags reach the relay's configuration.
func TestRelayConfigFromFlags(t *testing.T) {
	o := &relayOptions{batch: 7, roundBatches: 3, poll: 2 * time.Second, maxAttempts: 4, retention: time.Hour}
	got := o.relayConfig()
	if got.BatchSize != 7 || got.RoundBatches != 3 || got.PollInterval != 2*time.Second || got.MaxAttempts != 4 || got.Retention != time.Hour {
		t.Errorf("relayConfig() = %+v, want the flags' values", got)
	}
}
