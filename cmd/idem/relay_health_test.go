package main

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemhq/idem/internal/testsvc"
)

// /healthz turns 503 when messages wait and none is published for --stall-after,
// here because the webhook receiver refuses every message while the database
// answers; and 200 again once the receiver takes them.
func TestRelayHealthStalls(t *testing.T) {
	t.Parallel()
	secret := strings.Repeat("s", 32)
	var accept atomic.Bool
	var delivered atomic.Int64
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !accept.Load() {
			http.Error(w, "down for maintenance", http.StatusInternalServerError)
			return
		}
		delivered.Add(1)
	}))
	t.Cleanup(receiver.Close)
	path, _, enqueue := sqliteOutbox(t, "orders")
	enqueue("s1")
	r := startRelay(t, "--db", "sqlite:"+path, "--sink", receiver.URL+"/hook", "--webhook-secret", secret,
		"--poll", "100ms", "--stall-after", "300ms", "--max-attempts", "1000")
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("relay output:\n%s", r.stderr)
		}
	})
	var code int
	var body string
	// (A ping that comes late on a loaded machine also makes a 503, of another
	// reason: the test waits for the stall's.)
	testsvc.Eventually(t, time.Minute, "/healthz to report the stall", func() bool {
		code, body = r.get(t, "/healthz")
		return code == http.StatusServiceUnavailable && strings.Contains(body, "messages wait and none was published")
	})
	if !strings.Contains(body, "webhook returned 500") || strings.Contains(body, "maintenance") {
		t.Errorf("/healthz = %q, want the stall and the sink's reason in idem's words", body)
	}
	accept.Store(true)
	testsvc.Eventually(t, 2*time.Minute, "the message delivered and /healthz 200", func() bool {
		code, body = r.get(t, "/healthz")
		return delivered.Load() == 1 && code == http.StatusOK
	})
	r.stop(t)
}
