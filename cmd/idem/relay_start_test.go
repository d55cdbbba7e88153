package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/bits"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemhq/idem/cmd/idem/internal/cli"
	"github.com/idemhq/idem/internal/testsvc"
)

// relayStartErr runs `idem relay args…` and returns its stderr and error once it
// exits. A relay that starts relaying instead fails t (and is stopped).
func relayStartErr(t *testing.T, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stderr := &testsvc.Buffer{}
	done := make(chan error, 1)
	go func() { done <- NewMain(io.Discard, stderr).Run(ctx, append([]string{"relay"}, args...)) }()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		select {
		case err := <-done:
			return stderr.String(), err
		case <-time.After(10 * time.Millisecond):
		}
		if strings.Contains(stderr.String(), "idem relay: relaying") {
			cancel()
			<-done
			t.Errorf("relay %v started although its sink does not answer:\n%s", args, stderr)
			return stderr.String(), nil
		}
		if time.Now().After(deadline) {
			t.Fatalf("relay %v neither failed nor started within 2 minutes:\n%s", args, stderr)
		}
	}
}

// Every kind of sink is checked at start, and one that does not answer is a
// runtime error (exit status 1) naming --sink and the fix: a closed Kafka port as
// a closed NATS port, and a Pub/Sub or SQS endpoint or a webhook receiver too (its
// certificate included, and without a request).
func TestRelayUnreachableSinks(t *testing.T) {
	t.Setenv("PUBSUB_EMULATOR_HOST", testsvc.ClosedAddr(t))
	t.Setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "wJalrXUtnFEMI-K7MDENG-bPxRfiCYEXAMPLEKEY")
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	t.Setenv("AWS_CONFIG_FILE", filepath.Join(t.TempDir(), "none"))
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(t.TempDir(), "none"))
	file := filepath.Join(t.TempDir(), "app.db")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	secret := strings.Repeat("s", 32)
	var requests atomic.Int64
	untrusted := httptest.NewTLSServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { requests.Add(1) }))
	t.Cleanup(untrusted.Close)
	for _, c := range []struct{ kind, sink, names string }{
		{"nats", "nats://" + testsvc.ClosedAddr(t), "NATS does not answer"},
		{"kafka", "kafka://" + testsvc.ClosedAddr(t), "Kafka does not answer"},
		{"redis", "redis://" + testsvc.ClosedAddr(t), "Redis does not answer"},
		{"amqp", "amqp://guest:guest@" + testsvc.ClosedAddr(t) + "/", "RabbitMQ does not answer"},
		{"pubsub", "pubsub://proj", "Pub/Sub does not answer"},
		{"sqs", "sqs://" + testsvc.ClosedAddr(t), "SQS does not answer"},
		{"webhook", "http://" + testsvc.ClosedAddr(t) + "/hook", "the webhook receiver does not answer"},
		{"webhook-certificate", untrusted.URL + "/hook", "the webhook receiver does not answer: tls: failed to verify certificate"},
	} {
		t.Run(c.kind, func(t *testing.T) {
			stderr, err := relayStartErr(t, "--db", "sqlite:"+file, "--sink", c.sink, "--webhook-secret", secret, "--listen", "")
			if err == nil {
				return // relayStartErr failed t
			}
			if errors.Is(err, cli.ErrUsage) || !strings.Contains(err.Error(), "--sink ") || !strings.Contains(err.Error(), c.names) ||
				!strings.Contains(err.Error(), "that this host can reach it") {
				t.Errorf("unreachable %s: %v\n%s\nwant a runtime error naming --sink, %q and the fix", c.kind, err, stderr, c.names)
			}
		})
	}
	if n := requests.Load(); n != 0 {
		t.Errorf("the receiver got %d requests from the check, want none", n)
	}
}

var (
	warnLineRE = regexp.MustCompile(`(?m)^.*level=WARN msg="([^"]*)".*$`)
	failuresRE = regexp.MustCompile(` failures=(\d+) `)
)

// A database outage makes every loop of the relay fail (rounds, LISTEN, the
// health ping): each logs the first failure, then a line at the 8th, 16th, 32nd…
// with the count, never one per attempt; and when the database is back the relay
// says so and publishes.
func TestRelayDatabaseOutageLogs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cs, _ := testsvc.PostgresSchema(t)
	proxy, through := testsvc.PostgresProxy(t, cs)
	pool, ob := postgresOutbox(t, cs) // the service, straight to the database
	js, stream, subject := natsTestStream(t)
	enqueue := func(id string) {
		t.Helper()
		if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			_, err := ob.EnqueueTx(ctx, tx, msg(subject+".orders", id))
			return err
		}); err != nil {
			t.Fatal(err)
		}
	}
	r := startRelay(t, "--db", through, "--sink", natsURL(), "--poll", "50ms")
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("relay output:\n%s", r.stderr)
		}
	})
	enqueue("before")
	streamMessages(t, js, stream, 1)

	// The logs from here on: taken before the outage, since cutting the connections
	// makes the listener log its first failure at once.
	from := len(r.stderr.String())
	proxy.Down()
	byMsg := func(logs string) map[string][]string {
		lines := map[string][]string{}
		for _, m := range warnLineRE.FindAllStringSubmatch(logs, -1) {
			lines[m[1]] = append(lines[m[1]], m[0])
		}
		return lines
	}
	const roundFailed = "outbox relay: round failed"
	// The failed rounds so far: idem_relay_round_failures_total (a relay without
	// that counter logged each failed round, so its lines count them).
	roundFailures := func() int {
		_, body := r.get(t, "/metrics")
		n := len(byMsg(r.stderr.String()[from:])[roundFailed])
		if m := regexp.MustCompile(`(?m)^idem_relay_round_failures_total (\d+)`).FindStringSubmatch(body); m != nil {
			c, _ := strconv.Atoi(m[1])
			n = max(n, c)
		}
		return n
	}
	testsvc.Eventually(t, 2*time.Minute, "10 failed rounds", func() bool { return roundFailures() >= 10 })
	logs := r.stderr.String()[from:]
	n := roundFailures()
	if err := proxy.Up(); err != nil {
		t.Fatal(err)
	}

	warnings := byMsg(logs)
	rounds := warnings[roundFailed]
	if want := bits.Len(uint(n)) - 2; len(rounds) < 2 || len(rounds) > want {
		t.Errorf("%d failed rounds logged %d lines, want 2 to %d (the 1st, 8th, 16th…):\n%s", n, len(rounds), want, logs)
	}
	for msg, lines := range warnings {
		for i, line := range lines {
			m := failuresRE.FindStringSubmatch(line)
			switch {
			case i == 0 && m != nil:
				t.Errorf("the first %q line counts failures: %s", msg, line)
			case i > 0 && (m == nil || m[1] != fmt.Sprint(4<<i)):
				t.Errorf("%q line %d = %s, want failures=%d: a repeated failure is logged at the 8th, 16th, 32nd…", msg, i+1, line, 4<<i)
			}
		}
	}

	enqueue("after")
	checkIDs(t, streamMessages(t, js, stream, 2), "before", "after")
	testsvc.Eventually(t, time.Minute, "the relay to say its rounds succeed again", func() bool {
		return strings.Contains(r.stderr.String()[from:], `msg="outbox relay: rounds succeed again"`)
	})
	r.stop(t)
}
