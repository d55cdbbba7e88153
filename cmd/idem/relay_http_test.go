package main

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

func TestRelayHealth(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_000_000, 0)
	h := newHealth(3 * time.Second)
	h.now = func() time.Time { return now }
	h.lastPing = now
	srv := httptest.NewServer(relayHandler(prometheus.NewRegistry(), h))
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
	h.pinged(errors.New("connection refused"))
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
	h.published(errors.New("no responders"))
	h.pinged(nil)
	now = now.Add(10 * time.Second)
	h.pinged(nil)
	if code, body := healthz(); code != http.StatusOK || !strings.Contains(body, "no responders") {
		t.Fatalf("broker failing, database up: %d %q, want 200 naming the failure", code, body)
	}
}
