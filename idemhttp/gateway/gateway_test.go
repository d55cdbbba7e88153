package gateway

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemmem"
)

func memStore(t *testing.T) idem.Store {
	t.Helper()
	s, err := idemmem.New(idemmem.Config{})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// New refuses a Config it cannot run, naming the field.
func TestNewRefusesBadConfig(t *testing.T) {
	t.Parallel()
	up := &url.URL{Scheme: "http", Host: "127.0.0.1:9"}
	for _, c := range []struct {
		cfg   Config
		field string
	}{
		{Config{Store: memStore(t)}, "Config.Upstream"},
		{Config{Upstream: &url.URL{Scheme: "ftp", Host: "h"}, Store: memStore(t)}, "Config.Upstream"},
		{Config{Upstream: up}, "Config.Store"},
		{Config{Upstream: up, Store: memStore(t), WriteTimeout: time.Second, UpstreamTimeout: 2 * time.Second}, "Config.WriteTimeout"},
	} {
		_, err := New(c.cfg)
		if ie, ok := errors.AsType[*idem.InputError](err); !ok || ie.Field != c.field {
			t.Errorf("New(%+v) = %v, want an InputError on %s", c.cfg, err, c.field)
		}
	}
	g, err := New(Config{Upstream: up, Store: memStore(t)})
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Close(); !errors.Is(err, errNotServing) {
		t.Errorf("Close before Serve = %v, want errNotServing", err)
	}
}

// An upstream that cannot be reached gets 502, and the key is released, not
// stored: the retry runs again (and gets 502 again, not a replay).
func TestUnreachableUpstream(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	g, err := New(Config{Upstream: &url.URL{Scheme: "http", Host: addr}, Store: memStore(t)})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(g)
	t.Cleanup(srv.Close)
	for i := range 2 {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/pay", strings.NewReader("{}"))
		req.Header.Set("Idempotency-Key", "k1")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadGateway || resp.Header.Get("Idempotent-Replayed") != "" {
			t.Errorf("attempt %d: %d %q (replayed %q), want a fresh 502", i+1, resp.StatusCode, body, resp.Header.Get("Idempotent-Replayed"))
		}
	}
}

// Run serves the default admin handler: /healthz claims the store, /metrics
// gathers the Registerer.
func TestRunServesAdmin(t *testing.T) {
	t.Parallel()
	up := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	t.Cleanup(up.Close)
	u, _ := url.Parse(up.URL)
	g, err := New(Config{Upstream: u, Store: memStore(t), Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	adminLn, _ := net.Listen("tcp", "127.0.0.1:0")
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- g.Run(ctx, ln, adminLn) }()
	for _, path := range []string{"/healthz", "/metrics"} {
		resp, err := http.Get("http://" + adminLn.Addr().String() + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || (path == "/healthz" && !strings.HasPrefix(string(body), "ok")) {
			t.Errorf("GET %s: %d %q, want 200", path, resp.StatusCode, body)
		}
	}
	stop()
	if err := <-done; err != nil {
		t.Errorf("Run after a stop = %v, want nil", err)
	}
}
