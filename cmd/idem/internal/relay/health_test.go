package relay

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemhttp"
	"github.com/idemhq/idem/internal/redact"
)

func TestRelayHealth(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_000_000, 0)
	h := NewHealth(3*time.Second, slog.New(slog.DiscardHandler))
	h.now = func() time.Time { return now }
	h.lastPing = now
	srv := httptest.NewServer(Handler(prometheus.NewRegistry(), h))
	t.Cleanup(srv.Close)
	healthz := func() (int, string) {
		t.Helper()
		resp, err := http.Get(srv.URL + "/healthz")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}

	if code, body := healthz(); code != http.StatusOK || !strings.HasPrefix(body, "ok") {
		t.Fatalf("fresh: %d %q, want 200 ok", code, body)
	}
	// The database stops answering: unhealthy once the window has passed.
	now = now.Add(2 * time.Second)
	refused := fmt.Errorf("failed to connect to `user=app database=orders`: %w",
		&net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)})
	h.pinged(refused)
	if code, _ := healthz(); code != http.StatusOK {
		t.Fatalf("within the window: %d, want 200", code)
	}
	now = now.Add(2 * time.Second)
	if code, body := healthz(); code != http.StatusServiceUnavailable || !strings.Contains(body, "connection refused") {
		t.Fatalf("past the window: %d %q, want 503 naming the last error", code, body)
	}
	// A successful publication counts as a sign of life.
	h.published(nil)
	if code, _ := healthz(); code != http.StatusOK {
		t.Fatalf("after a publication: %d, want 200", code)
	}
	// A failing broker with a live database stays healthy, and says what fails.
	h.published(fmt.Errorf("nats publish: %w", nats.ErrNoResponders))
	h.pinged(nil)
	now = now.Add(10 * time.Second)
	h.pinged(nil)
	if code, body := healthz(); code != http.StatusOK || !strings.Contains(body, "no responders") {
		t.Fatalf("broker failing, database up: %d %q, want 200 naming the failure", code, body)
	}
}

// Messages that wait with none published for longer than stallAfter make the
// relay unhealthy, whatever the cause, with the sink's reason when it has one.
func TestRelayHealthStall(t *testing.T) {
	t.Parallel()
	h := NewHealth(3*time.Second, slog.New(slog.DiscardHandler))
	h.StallAfter = time.Minute
	var stalled time.Duration
	ping := h.WatchStall(func(context.Context) (time.Duration, error) { return stalled, nil })
	for _, c := range []struct {
		stalled time.Duration
		sinkErr error
		ok      bool
		want    string
	}{
		{0, nil, true, "ok"},
		{59 * time.Second, nil, true, "ok"},
		{61 * time.Second, nil, false, "messages wait and none was published for 1m1s (limit 1m0s); the relay's rounds"},
		{2 * time.Minute, &idemhttp.StatusError{StatusCode: 503, Body: "secret"}, false, "none was published for 2m0s (limit 1m0s); the last attempt failed: sink: webhook returned 503"},
		{0, nil, true, "ok"},
	} {
		stalled = c.stalled
		h.published(c.sinkErr)
		h.pinged(ping(context.Background()))
		if ok, msg := h.Check(); ok != c.ok || !strings.Contains(msg, c.want) || strings.Contains(msg, "secret") {
			t.Errorf("stalled %v: check() = %v %q, want %v %q", c.stalled, ok, msg, c.ok, c.want)
		}
	}
}

// /healthz reports what failed in idem's words, never a downstream's: a webhook
// receiver's error page quoting its database URL stays out of it. The log has the
// details, with the password masked.
func TestRelayHealthHidesDownstreamText(t *testing.T) {
	t.Parallel()
	const leak = "postgres://app:hunter2@db.internal/orders"
	var logs bytes.Buffer
	log := slog.New(redact.Handler(slog.NewTextHandler(&logs, nil)))
	h := NewHealth(3*time.Second, log)
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "pq: cannot reach "+leak, http.StatusInternalServerError)
	}))
	t.Cleanup(receiver.Close)
	wh, err := idemhttp.NewWebhookSink(idemhttp.WebhookConfig{URL: receiver.URL + "/hook?token=t0k3n", Secret: []byte(strings.Repeat("s", 32))})
	if err != nil {
		t.Fatal(err)
	}
	err = h.Track(wh).Publish(context.Background(), idem.Message{ID: "m1", Topic: "orders"})
	if err == nil {
		t.Fatal("Publish to a failing receiver succeeded")
	}
	log.Warn("outbox relay: publish failed; will retry", "err", err) // as the relay logs it
	h.pinged(fmt.Errorf("ping %s: %w", leak, &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}))

	srv := httptest.NewServer(Handler(prometheus.NewRegistry(), h))
	t.Cleanup(srv.Close)
	resp, err := http.Get(srv.URL + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if s := string(body); strings.Contains(s, "hunter2") || strings.Contains(s, "t0k3n") || strings.Contains(s, "db.internal") ||
		!strings.Contains(s, "sink: webhook returned 500") {
		t.Errorf("/healthz = %q, want a sanitized reason (sink: webhook returned 500) and no downstream text", s)
	}
	if s := logs.String(); strings.Contains(s, "hunter2") || strings.Contains(s, "t0k3n") || !strings.Contains(s, "500") ||
		!strings.Contains(s, "db.internal") {
		t.Errorf("log = %q, want the details (status, body) with the secrets masked", s)
	}
}
