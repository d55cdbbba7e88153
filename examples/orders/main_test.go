package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/idemhq/idem/internal/testsvc"
)

// demoTimeout only ends a run that hangs.
const demoTimeout = 3 * time.Minute

// runDemo runs the demo on cfg and checks, from the database, the payment API and
// the consumer, that every order was stored, applied and charged exactly once
// although the client retried a POST, JetStream redelivered a message whose ack
// was lost, the client retried a charge whose response was lost, and the worker
// lost its record of a charge.
func runDemo(t *testing.T, cfg Config) {
	t.Helper()
	cfg.Addr, cfg.AckWait, cfg.DemoFaults = "127.0.0.1:0", time.Second, true
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	ctx, cancel := context.WithTimeout(context.Background(), demoTimeout)
	defer cancel()
	app, err := Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer app.Close()
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- app.Run(runCtx) }()
	var out bytes.Buffer
	rep, err := Demo(ctx, app, &out)
	stop()
	if rerr := <-done; rerr != nil {
		t.Errorf("Run: %v", rerr)
	}
	if err != nil {
		t.Fatalf("Demo: %v\n%s", err, out.String())
	}
	t.Log("\n" + out.String())

	if rep.Stored != len(demoOrders) {
		t.Errorf("%d orders stored for %d keys: the retried POST made another order", rep.Stored, len(demoOrders))
	}
	ackLost, responseLost, recordLost := app.faults.lost()
	for _, o := range rep.Orders {
		if !o.SameID {
			t.Errorf("%s: the retried POST did not return the stored order", o.Key)
		}
		if o.LedgerEntries != 1 {
			t.Errorf("order %s: %d ledger entries, want 1", o.ID, o.LedgerEntries)
		}
		if o.Charges != 1 {
			t.Errorf("order %s: charged %d times, want 1", o.ID, o.Charges)
		}
		switch o.ID {
		case ackLost:
			if o.Deliveries < 2 {
				t.Errorf("order %s: its ack was lost, yet it was delivered %d times: the redelivery was not exercised", o.ID, o.Deliveries)
			}
		case recordLost:
			// The worker asked the fence again; the fence answered from its
			// record, without a second call.
			if o.Attempts < 2 || o.PaymentCalls != 1 {
				t.Errorf("order %s: %d charge attempts made %d payment calls, want at least 2 attempts and 1 call", o.ID, o.Attempts, o.PaymentCalls)
			}
		}
		if o.ID == responseLost && o.PaymentCalls < 2 {
			t.Errorf("order %s: its response was lost, yet the payment API got %d calls: the retry was not exercised", o.ID, o.PaymentCalls)
		}
	}
	if ackLost == "" || responseLost == "" || recordLost == "" {
		t.Errorf("faults not all made: ack lost on %q, response on %q, record on %q", ackLost, responseLost, recordLost)
	}
}

// The embedded defaults: SQLite in a temporary directory, an in-process NATS.
func TestDemoEmbedded(t *testing.T) {
	t.Parallel()
	runDemo(t, Config{})
}

// Postgres (a fresh schema) and the NATS server of the test services (a stream
// and subject of the test's own).
func TestDemoPostgresNATS(t *testing.T) {
	t.Parallel()
	pg, _ := testsvc.PostgresSchema(t)
	natsURL := natsURL()
	js := testsvc.JetStream(t, natsURL)
	stream := testsvc.UniqueName("IDEM_EXAMPLE_ORDERS_")
	t.Cleanup(func() { _ = js.DeleteStream(context.Background(), stream) })
	runDemo(t, Config{Postgres: pg, NATS: natsURL, Stream: stream, Subject: strings.ToLower(stream) + ".placed"})
}

// natsURL is the NATS server of the test services.
func natsURL() string {
	if u := os.Getenv("IDEM_TEST_NATS_URL"); u != "" {
		return u
	}
	return "nats://127.0.0.1:4222"
}

// What a user runs first: go run ./examples/orders --demo.
func TestRunDemoFlag(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), demoTimeout)
	defer cancel()
	var out, errOut bytes.Buffer
	if err := run(ctx, []string{"--demo", "--ack-wait", "1s"}, &out, &errOut); err != nil {
		t.Fatalf("run --demo: %v\nstdout:\n%s\nstderr:\n%s", err, out.String(), errOut.String())
	}
	if !strings.Contains(out.String(), "every order applied once and charged once") {
		t.Errorf("run --demo printed:\n%s", out.String())
	}
}

// The API refuses what it cannot make safe, and says why.
func TestAPIRefusals(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), demoTimeout)
	defer cancel()
	app, err := Open(ctx, Config{Addr: "127.0.0.1:0", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer app.Close()
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- app.Run(runCtx) }()
	defer func() { stop(); <-done }()

	post := func(key, body string) (int, string) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, app.URL()+"/orders", strings.NewReader(body))
		if key != "" {
			req.Header.Set("Idempotency-Key", key)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := post("", `{"customer":"ada","amount":100}`); code != http.StatusBadRequest {
		t.Errorf("POST without a key: %d %s, want 400", code, body)
	}
	if code, body := post("k-bad", `{"customer":"ada","amount":-1}`); code != http.StatusBadRequest || !strings.Contains(body, "amount") {
		t.Errorf("POST with a negative amount: %d %s, want 400 naming the amount", code, body)
	}
	if code, body := post("k1", `{"customer":"ada","amount":100}`); code != http.StatusCreated {
		t.Fatalf("POST: %d %s, want 201", code, body)
	}
	if code, body := post("k1", `{"customer":"ada","amount":999}`); code != http.StatusUnprocessableEntity {
		t.Errorf("POST of another body with a used key: %d %s, want 422", code, body)
	}
	resp, err := http.Get(app.URL() + "/orders/no-such-order")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("GET of an unknown order: %d, want 404", resp.StatusCode)
	}
}

// A NATS URL's credentials never reach an error or the banner.
func TestNATSCredentialsRedacted(t *testing.T) {
	t.Parallel()
	for _, raw := range []string{"nats://ada:s3cret@127.0.0.1:4222", "nats://s3cret@127.0.0.1:4222"} {
		if got := redactURL(raw); strings.Contains(got, "s3cret") || !strings.Contains(got, "127.0.0.1:4222") {
			t.Errorf("redactURL(%q) = %q", raw, got)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), demoTimeout)
	defer cancel()
	_, err := Open(ctx, Config{Addr: "127.0.0.1:0", NATS: "nats://ada:s3cret@" + testsvc.ClosedAddr(t),
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err == nil || strings.Contains(err.Error(), "s3cret") || !strings.Contains(err.Error(), "--nats") {
		t.Errorf("Open with an unreachable NATS: %v, want an error naming --nats without the password", err)
	}
}
