package main

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/cmd/idem/internal/cli"
	"github.com/idemhq/idem/cmd/idem/internal/open"
	"github.com/idemhq/idem/internal/testsvc"
)

const pw = "Pa55w0rdS3cr3t"

// A password or a secret query value in --db or --sink never appears in an error or
// in the output, whatever the scheme and whichever step fails: parsing, connecting.
func TestRelayHidesCredentials(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "app.db")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	db, nats, closed := "sqlite:"+file, natsURL(), testsvc.ClosedAddr(t)
	for _, c := range []struct {
		name string
		args []string
	}{
		{"postgres connect", []string{"--db", "postgres://app:" + pw + "@" + closed + "/orders?sslmode=disable", "--sink", nats}},
		{"postgresql connect", []string{"--db", "postgresql://app:" + pw + "@" + closed + "/orders?sslmode=disable", "--sink", nats}},
		{"postgres password param", []string{"--db", "postgres://app@" + closed + "/orders?sslmode=disable&password=" + pw, "--sink", nats}},
		{"postgres parse", []string{"--db", "postgres://app:" + pw + "@db:notaport/orders", "--sink", nats}},
		{"postgres slash in password", []string{"--db", "postgres://app:a/" + pw + "@db/orders", "--sink", nats}},
		{"mysql", []string{"--db", "mysql://root:" + pw + "@tcp(db:3306)/app", "--sink", nats}},
		{"mysql connect", []string{"--db", "mysql://root:" + pw + "@" + closed + "/app", "--sink", nats}},
		{"mysql bad param", []string{"--db", "mysql://root:" + pw + "@db:3306/app?tls=bogus", "--sink", nats}},
		{"mysql no database", []string{"--db", "mysql://root:" + pw + "@db:3306", "--sink", nats}},
		{"redis connect", []string{"--db", db, "--sink", "redis://u:" + pw + "@" + closed + "/0"}},
		{"rediss parse", []string{"--db", db, "--sink", "rediss://u:" + pw + "@cache:badport"}},
		{"amqp connect", []string{"--db", db, "--sink", "amqp://guest:" + pw + "@" + closed + "/"}},
		{"amqps parse", []string{"--db", db, "--sink", "amqps://guest:" + pw + "@mq:badport/"}},
		{"nats connect", []string{"--db", db, "--sink", "nats://u:" + pw + "@" + closed}},
		{"tls connect", []string{"--db", db, "--sink", "tls://u:" + pw + "@" + closed}},
		{"kafka userinfo", []string{"--db", db, "--sink", "kafka://u:" + pw + "@" + closed}},
		{"kafka second broker", []string{"--db", db, "--sink", "kafka://" + closed + ",u:" + pw + "@k2"}},
		{"webhook bad URL", []string{"--db", db, "--sink", "https://u:" + pw + "@/hook", "--webhook-secret", strings.Repeat("s", 32)}},
		{"unknown scheme", []string{"--db", db, "--sink", "ftp://u:" + pw + "@h/?token=" + pw}},
	} {
		_, stderr, err := run(t, append([]string{"relay", "--listen", ""}, c.args...)...)
		if err == nil {
			t.Errorf("%s: relay succeeded, want a failure", c.name)
			continue
		}
		if strings.Contains(err.Error(), pw) || strings.Contains(stderr, pw) {
			t.Errorf("%s: the secret leaked:\nerr: %v\nstderr: %s", c.name, err, stderr)
		}
	}
}

// A webhook whose URL holds credentials fails at run time (the receiver refuses,
// quoting a secret of its own): the log keeps the details without any secret, and
// /healthz says only what failed.
func TestRelayWebhookFailureHidesSecrets(t *testing.T) {
	t.Parallel()
	const quoted = "postgres://app:hunter2@db.internal/orders"
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "cannot reach "+quoted, http.StatusInternalServerError)
	}))
	t.Cleanup(receiver.Close)
	path, _, enqueue := sqliteOutbox(t, "orders.created")
	enqueue("h1")
	hook := strings.Replace(receiver.URL, "http://", "http://u:"+pw+"@", 1) + "/hook?token=" + pw
	r := startRelay(t, "--db", "sqlite:"+path, "--sink", hook, "--webhook-secret", strings.Repeat("k", 32), "--poll", "50ms")
	for deadline := time.Now().Add(15 * time.Second); !strings.Contains(r.stderr.String(), "publish failed"); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no publication failed within 15s:\n%s", r.stderr)
		}
	}
	code, body := r.get(t, "/healthz")
	if code != http.StatusOK || !strings.Contains(body, "sink: webhook returned 500") || strings.Contains(body, "hunter2") || strings.Contains(body, pw) {
		t.Errorf("/healthz = %d %q, want 200 naming the status only", code, body)
	}
	r.stop(t)
	if log := r.stderr.String(); strings.Contains(log, pw) || strings.Contains(log, "hunter2") || !strings.Contains(log, "db.internal") {
		t.Errorf("log holds a secret, or not the details:\n%s", log)
	}
}

// A webhook secret shorter than 32 bytes is refused, naming the flag and the fix;
// the secret itself is not printed.
func TestRelayRefusesShortWebhookSecret(t *testing.T) {
	t.Setenv("IDEM_WEBHOOK_SECRET", "")
	file := filepath.Join(t.TempDir(), "app.db")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, secret := range []string{"x", strings.Repeat("y", 31)} {
		o := &relayOptions{db: "sqlite:" + file, sink: "https://example.com/hook",
			batch: 1, roundBatches: 1, poll: time.Second, maxAttempts: 1, retention: time.Hour,
			SinkFlags: open.SinkFlags{WebhookSecret: secret, WebhookTimeout: time.Second}}
		_, _, err := o.check()
		var ie *idem.InputError
		if !errors.As(err, &ie) || !strings.Contains(ie.Field, "--webhook-secret") || !strings.Contains(ie.Field, "$IDEM_WEBHOOK_SECRET") ||
			!strings.Contains(ie.Fix, "openssl rand -hex 32") {
			t.Errorf("%d-byte secret: check = %v, want an *idem.InputError naming --webhook-secret, $IDEM_WEBHOOK_SECRET and the fix", len(secret), err)
		}
		_, stderr, err := run(t, "relay", "--db", "sqlite:"+file, "--sink", "https://example.com/hook", "--webhook-secret", secret)
		if !errors.Is(err, cli.ErrUsage) || !strings.Contains(stderr, "openssl rand -hex 32") || strings.Contains(stderr, "yyyy") {
			t.Errorf("%d-byte secret: relay err %v, stderr %q; want a usage error with the fix, without the secret", len(secret), err, stderr)
		}
	}
	t.Setenv("IDEM_WEBHOOK_SECRET", "z")
	if _, stderr, err := run(t, "relay", "--db", "sqlite:"+file, "--sink", "https://example.com/hook"); !errors.Is(err, cli.ErrUsage) ||
		!strings.Contains(stderr, "IDEM_WEBHOOK_SECRET") {
		t.Errorf("short $IDEM_WEBHOOK_SECRET: err %v, stderr %q; want a usage error naming it", err, stderr)
	}
}

// /metrics and /healthz are served on loopback unless --listen says otherwise.
func TestRelayListensOnLoopbackByDefault(t *testing.T) {
	t.Parallel()
	_, stderr, _ := run(t, "relay", "--help")
	if !strings.Contains(stderr, `(default "127.0.0.1:9464")`) {
		t.Errorf("relay --help does not show the loopback default:\n%s", stderr)
	}
	if defaultRelayListen != "127.0.0.1:9464" {
		t.Errorf("defaultRelayListen = %q, want 127.0.0.1:9464", defaultRelayListen)
	}
}

// idem verify's --db: a URL that does not parse, or a server that refuses, gives an
// error without the password.
func TestVerifyDBHidesCredentials(t *testing.T) {
	t.Parallel()
	for _, raw := range []string{
		"postgres://app:" + pw + "@db:notaport/orders",
		"postgresql://app:" + pw + "@" + testsvc.ClosedAddr(t) + "/orders?sslmode=disable&connect_timeout=5",
	} {
		db, err := open.VerifyDatabase(context.Background(), raw, false)
		if err == nil {
			db.Close()
			t.Errorf("VerifyDatabase(%s) succeeded, want a failure", raw)
			continue
		}
		if strings.Contains(err.Error(), pw) {
			t.Errorf("VerifyDatabase: the secret leaked: %v", err)
		}
	}
}
