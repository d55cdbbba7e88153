package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/cmd/idem/internal/cli"
	"github.com/idemhq/idem/idemhttp"
	"github.com/idemhq/idem/idemhttp/gateway"
	"github.com/idemhq/idem/internal/testsvc"
)

// upstream is the service behind the gateway. Every response body holds random
// bytes, so a replay that re-ran the handler would not match byte for byte.
type upstream struct {
	*httptest.Server
	mu    sync.Mutex
	calls map[string]int // by method and Idempotency-Key
}

// newUpstream starts the upstream on ln, or on a port of its own when ln is nil. The
// handler of /slow is slow, if given.
func newUpstream(t *testing.T, slow http.HandlerFunc, ln net.Listener) *upstream {
	t.Helper()
	u := &upstream{calls: map[string]int{}}
	u.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		u.mu.Lock()
		u.calls[r.Method+" "+r.Header.Get(idemhttp.HeaderKey)]++
		n := u.calls[r.Method+" "+r.Header.Get(idemhttp.HeaderKey)]
		u.mu.Unlock()
		if r.URL.Path == "/slow" && slow != nil {
			slow(w, r)
			return
		}
		noise := make([]byte, 64)
		_, _ = rand.Read(noise)
		w.Header().Set("Content-Type", "application/vnd.test+binary")
		w.Header().Set("Location", fmt.Sprintf("/orders/%d", n))
		status := http.StatusCreated
		if r.Method == http.MethodGet {
			status = http.StatusOK
		}
		w.WriteHeader(status)
		_, _ = w.Write(append(append([]byte(r.Method+" "+r.URL.Path+"\x00\xff"), noise...), body...))
	}))
	if ln != nil {
		u.Listener.Close()
		u.Listener = ln
	}
	u.Start()
	t.Cleanup(u.Close)
	return u
}

func (u *upstream) callsOf(method, key string) int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.calls[method+" "+key]
}

type reply struct {
	status int
	header http.Header
	body   []byte
}

func send(t testing.TB, method, rawURL, key, body string) reply {
	t.Helper()
	req, err := http.NewRequest(method, rawURL, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set(idemhttp.HeaderKey, key)
	}
	req.Header.Set("Authorization", "Bearer tenant-a")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Errorf("%s %s: %v", method, rawURL, err)
		return reply{}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Errorf("%s %s: read body: %v", method, rawURL, err)
	}
	return reply{resp.StatusCode, resp.Header, b}
}

// checkReplay posts key twice through the gateway and checks the second answer is the
// first, byte for byte, marked replayed, with the upstream run once.
func checkReplay(t *testing.T, g *runningGateway, up *upstream, key string) {
	t.Helper()
	first := send(t, "POST", "http://"+g.addr+"/orders?x=1", key, `{"amount":5}`)
	if first.status != http.StatusCreated || first.header.Get(idemhttp.HeaderReplayed) != "" {
		t.Fatalf("first POST: %d %v %q, want 201 not replayed\n%s", first.status, first.header, first.body, g.stderr)
	}
	again := send(t, "POST", "http://"+g.addr+"/orders?x=1", key, `{"amount":5}`)
	if again.status != first.status || !bytes.Equal(again.body, first.body) ||
		again.header.Get("Content-Type") != first.header.Get("Content-Type") ||
		again.header.Get("Location") != first.header.Get("Location") ||
		again.header.Get(idemhttp.HeaderReplayed) != "true" {
		t.Fatalf("retry: %d %v %q\nwant a replay of: %d %v %q", again.status, again.header, again.body,
			first.status, first.header, first.body)
	}
	if n := up.callsOf("POST", key); n != 1 {
		t.Fatalf("upstream ran %d times for key %s, want 1", n, key)
	}
}

func TestServeReplaysThroughGateway(t *testing.T) {
	t.Parallel()
	up := newUpstream(t, nil, nil)
	g := startGateway(t, up.URL, "--store", "sqlite:"+filepath.Join(t.TempDir(), "gw.db"), "--wait", "30s")
	checkReplay(t, g, up, "order-1")

	// The same key with another body is another request: 422, and the upstream is not called.
	if r := send(t, "POST", "http://"+g.addr+"/orders?x=1", "order-1", `{"amount":6}`); r.status != http.StatusUnprocessableEntity {
		t.Fatalf("changed body: %d %q, want 422", r.status, r.body)
	}

	// 50 concurrent identical requests: the upstream runs once and all get its answer.
	var wg sync.WaitGroup
	replies := make([]reply, 50)
	for i := range replies {
		wg.Go(func() { replies[i] = send(t, "POST", "http://"+g.addr+"/orders", "order-2", `{"amount":7}`) })
	}
	wg.Wait()
	for i, r := range replies {
		if r.status != http.StatusCreated || !bytes.Equal(r.body, replies[0].body) {
			t.Fatalf("concurrent request %d: %d %q, want 201 %q", i, r.status, r.body, replies[0].body)
		}
	}
	if n := up.callsOf("POST", "order-2"); n != 1 {
		t.Fatalf("upstream ran %d times for 50 concurrent identical requests, want 1", n)
	}

	// GET passes through untouched, key or not; so does a path the admin listener serves.
	for _, path := range []string{"/orders", "/orders", "/metrics", "/healthz"} {
		if r := send(t, "GET", "http://"+g.addr+path, "get-key", ""); r.status != http.StatusOK ||
			r.header.Get(idemhttp.HeaderReplayed) != "" || !bytes.HasPrefix(r.body, []byte("GET "+path)) {
			t.Fatalf("GET %s: %d %v %q, want the upstream's 200", path, r.status, r.header, r.body)
		}
	}
	if n := up.callsOf("GET", "get-key"); n != 4 {
		t.Fatalf("upstream saw %d GETs, want 4", n)
	}

	if r := send(t, "GET", "http://"+g.admin+"/healthz", "", ""); r.status != http.StatusOK || !bytes.HasPrefix(r.body, []byte("ok")) {
		t.Fatalf("admin /healthz: %d %q, want 200 ok", r.status, r.body)
	}
	r := send(t, "GET", "http://"+g.admin+"/metrics", "", "")
	if want := `idem_http_requests_total{outcome="executed"}`; !bytes.Contains(r.body, []byte(want)) {
		t.Errorf("admin /metrics lacks %s:\n%s", want, r.body)
	}
	// The store's metrics are labelled by scope, one value per caller behind a
	// gateway: it does not export them.
	if bytes.Contains(r.body, []byte("idem_claims_total")) {
		t.Errorf("admin /metrics exports the per-scope idem_claims_total")
	}
	g.stop(t)
}

// A restarted gateway on the same store still replays, without calling the upstream.
func TestServeRestartKeepsReplaying(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		store func(t *testing.T) string
	}{
		{"sqlite", func(t *testing.T) string { return "sqlite:" + filepath.Join(t.TempDir(), "gw.db") }},
		{"postgres", func(t *testing.T) string { cs, _ := testsvc.PostgresSchema(t); return cs }},
		{"mysql", func(t *testing.T) string { return testsvc.MySQLDatabase(t) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			store := tc.store(t)
			up := newUpstream(t, nil, nil)
			g := startGateway(t, up.URL, "--store", store)
			first := send(t, "POST", "http://"+g.addr+"/orders", "restart-1", "pay 5")
			if first.status != http.StatusCreated {
				t.Fatalf("first POST: %d %q\n%s", first.status, first.body, g.stderr)
			}
			g.stop(t)

			g = startGateway(t, up.URL, "--store", store)
			again := send(t, "POST", "http://"+g.addr+"/orders", "restart-1", "pay 5")
			if again.status != first.status || !bytes.Equal(again.body, first.body) || again.header.Get(idemhttp.HeaderReplayed) != "true" {
				t.Fatalf("after restart: %d %v %q, want the replay of %q", again.status, again.header, again.body, first.body)
			}
			if n := up.callsOf("POST", "restart-1"); n != 1 {
				t.Fatalf("upstream ran %d times, want 1", n)
			}
			g.stop(t)
		})
	}
}

func TestServeMemoryAndRedisStores(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		store func(t *testing.T) string
	}{
		{"memory", func(*testing.T) string { return "memory:" }},
		{"redis", func(t *testing.T) string {
			return "redis://" + testsvc.RedisAddr() + "/0?prefix=" + url.QueryEscape(testsvc.RedisPrefix(t))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			up := newUpstream(t, nil, nil)
			g := startGateway(t, up.URL, "--store", tc.store(t))
			checkReplay(t, g, up, "store-1")
			g.stop(t)
		})
	}
}

// A stop lets the request in flight finish: the upstream answers only after the
// gateway has closed its listener, and the client still gets the answer.
func TestServeShutdownFinishesInFlightRequest(t *testing.T) {
	t.Parallel()
	entered, release := make(chan struct{}), make(chan struct{})
	up := newUpstream(t, func(w http.ResponseWriter, _ *http.Request) {
		close(entered)
		<-release
		_, _ = io.WriteString(w, "done")
	}, nil)
	g := startGateway(t, up.URL, "--store", "memory:")
	got := make(chan reply, 1)
	go func() { got <- send(t, "POST", "http://"+g.addr+"/slow", "slow-1", "x") }()
	select {
	case <-entered:
	case <-time.After(30 * time.Second):
		t.Fatalf("the request did not reach the upstream\n%s", g.stderr)
	}
	g.cancel()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		conn, err := net.DialTimeout("tcp", g.addr, time.Second)
		if err != nil {
			break // the listener is closed: the shutdown has begun
		}
		conn.Close()
		if time.Now().After(deadline) {
			t.Fatalf("the gateway still accepts connections 30s after its cancellation\n%s", g.stderr)
		}
	}
	close(release)
	if r := <-got; r.status != http.StatusOK || string(r.body) != "done" {
		t.Fatalf("in-flight request: %d %q, want 200 done\n%s", r.status, r.body, g.stderr)
	}
	g.stop(t)
}

// A request the gateway could not deliver did not run: its 502 is not stored, and the
// retry runs once the upstream is up.
func TestServeUnreachableUpstreamIsNotReplayed(t *testing.T) {
	t.Parallel()
	addr := testsvc.ClosedAddr(t)
	g := startGateway(t, "http://"+addr, "--store", "memory:")
	if r := send(t, "POST", "http://"+g.addr+"/orders", "down-1", "x"); r.status != http.StatusBadGateway ||
		r.header.Get("Content-Type") != "application/problem+json" {
		t.Fatalf("upstream down: %d %v %q, want a 502 problem", r.status, r.header, r.body)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("the upstream's address was taken meanwhile: %v", err)
	}
	up := newUpstream(t, nil, ln)
	if r := send(t, "POST", "http://"+g.addr+"/orders", "down-1", "x"); r.status != http.StatusCreated ||
		r.header.Get(idemhttp.HeaderReplayed) != "" || up.callsOf("POST", "down-1") != 1 {
		t.Fatalf("upstream back: %d %v %q, want the upstream's 201", r.status, r.header, r.body)
	}
	g.stop(t)
}

func TestServeFlagErrors(t *testing.T) {
	t.Parallel()
	up := "http://127.0.0.1:9"
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "--upstream is required"},
		{[]string{"--upstream", "ftp://host/x"}, "--upstream"},
		{[]string{"--upstream", "127.0.0.1:9000"}, "--upstream"},
		{[]string{"--upstream", up, "--store", "mysql://db"}, "--store"},
		{[]string{"--upstream", up, "--store", "sqlite:"}, "--store"},
		{[]string{"--upstream", up, "--store", "memory:?max_bytes=lots"}, "--store"},
		{[]string{"--upstream", up, "--credential-cookies", "sid,a b"}, "--credential-cookies"},
		{[]string{"--upstream", up, "--max-conns", "0"}, "--max-conns"},
		{[]string{"--upstream", up, "--store", "memory:?maxbytes=1MiB"}, "--store"},
		{[]string{"--upstream", up, "--store", "redis://host:6379/x"}, "--store"},
		{[]string{"--upstream", up, "--listen", "8080"}, "--listen"},
		{[]string{"--upstream", up, "--admin-listen", "nohost"}, "--admin-listen"},
		{[]string{"--upstream", up, "--wait", "-1s"}, "--wait"},
		{[]string{"--upstream", up, "--lease", "0s"}, "--lease"},
		{[]string{"--upstream", up, "--retention", "-1h"}, "--retention"},
		{[]string{"--upstream", up, "--shutdown-timeout", "0s"}, "--shutdown-timeout"},
		{[]string{"--upstream", up, "--max-body", "0"}, "--max-body"},
		{[]string{"--upstream", up, "--max-body", "lots"}, "-max-body"},
		{[]string{"--upstream", up, "--oversize", "truncate"}, "--oversize"},
		{[]string{"--upstream", up, "--methods", "POST,GET"}, "--methods"},
		{[]string{"--upstream", up, "--methods", ","}, "--methods"},
		{[]string{"--upstream", up, "--replay-headers", "X Bad"}, "--replay-headers"},
		{[]string{"--upstream", up, "--scope-header", "Authorization"}, "--scope-header"},
		{[]string{"--upstream", up, "--scope-header", "X Tenant"}, "--scope-header"},
		{[]string{"--upstream", up, "--trust-scope-header"}, "--trust-scope-header needs --scope-header"},
		{[]string{"--upstream", up, "--max-inflight", "0"}, "--max-inflight"},
		{[]string{"--upstream", up, "--upstream-timeout", "0s"}, "--upstream-timeout"},
		{[]string{"--upstream", up, "--read-timeout", "0s"}, "--read-timeout"},
		{[]string{"--upstream", up, "--write-timeout", "-1s"}, "--write-timeout"},
		{[]string{"--upstream", up, "--write-timeout", "60s"}, "--write-timeout 1m0s must be longer than --upstream-timeout + --wait"},
		{[]string{"--upstream", up, "--write-timeout", "70s", "--wait", "10s"}, "--write-timeout 1m10s must be longer than --upstream-timeout + --wait"},
		{[]string{"--upstream", up, "--credential-headers", "X Key"}, "--credential-headers"},
		{[]string{"--upstream", up, "extra"}, `unexpected argument "extra"`},
	} {
		_, stderr, err := run(t, append([]string{"serve"}, tc.args...)...)
		if !errors.Is(err, cli.ErrUsage) || !strings.Contains(stderr, tc.want) {
			t.Errorf("serve %q: err %v, stderr %q; want a usage error naming %s", tc.args, err, stderr, tc.want)
		}
	}

	// An address in use is not a usage error, but it names the flag too.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	_, _, err = run(t, "serve", "--upstream", up, "--store", "memory:", "--listen", ln.Addr().String())
	if err == nil || errors.Is(err, cli.ErrUsage) || !strings.Contains(err.Error(), "--listen") {
		t.Fatalf("listen on a busy address: %v, want an error naming --listen", err)
	}
}

// The flags, and $IDEM_<FLAG> for those the command line leaves alone, reach the
// middleware's configuration.
func TestServeFlagsAndEnvironmentMapToConfig(t *testing.T) {
	t.Parallel()
	env := map[string]string{"IDEM_UPSTREAM": "https://api.internal/v1", "IDEM_STORE": "sqlite:env.db",
		"IDEM_STORE_5XX": "false", "IDEM_MAX_BODY": "2KiB", "IDEM_ADMIN_LISTEN": ""}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	fs, o := NewMain(io.Discard, io.Discard).serveFlags()
	if err := fs.Parse([]string{"--store", "memory:", "--wait", "3s", "--require-key", "--oversize", "pass",
		"--methods", "post, put", "--lease", "1m", "--retention", "2h", "--scope-header", "X-Tenant",
		"--fingerprint-headers", "X-Account", "--replay-headers", "Content-Type,X-Request-Id", "--max-inflight", "7",
		"--upstream-timeout", "20s"}); err != nil {
		t.Fatal(err)
	}
	if err := cli.ApplyEnv(fs, lookup); err != nil {
		t.Fatal(err)
	}
	spec, err := o.check()
	if err != nil {
		t.Fatal(err)
	}
	c := spec.cfg
	if c.Wait != 3*time.Second || !c.RequireKey || *c.StoreServerErrors || c.MaxBodyBytes != 2048 ||
		c.Oversize != idemhttp.PassThrough || fmt.Sprint(c.Methods) != "[POST PUT]" || c.Lease != time.Minute ||
		c.Retention != 2*time.Hour || fmt.Sprint(c.FingerprintHeaders) != "[X-Account]" ||
		fmt.Sprint(c.ReplayHeaders) != "[Content-Type X-Request-Id]" || c.Scope == nil || o.admin != "" ||
		spec.upstream.String() != env["IDEM_UPSTREAM"] || spec.store.Kind != "memory" || c.MaxInFlight != 7 ||
		o.upstreamTimeout != 20*time.Second || o.writeTimeout != 30*time.Second+20*time.Second+3*time.Second+5*time.Second {
		t.Fatalf("options %+v, config %+v: want the flags, and the environment where no flag was given", o, c)
	}
	r := httptest.NewRequest("POST", "/", nil)
	r.Header.Set("X-Tenant", "acme")
	if scope, err := c.Scope(r); err != nil || scope != "tenant:acme/anonymous" {
		t.Fatalf("scope = %q, %v; want the X-Tenant header's, without credentials", scope, err)
	}
	// A caller-controlled tenant header does not select the tenant's responses on
	// its own: the credentials are part of the scope, unless the header is trusted.
	r.Header.Set("X-Api-Key", "k1")
	if scope, err := c.Scope(r); err != nil || !strings.HasPrefix(scope, "tenant:acme/cred:") {
		t.Fatalf("scope with an API key = %q, %v; want the tenant and the credentials' hash", scope, err)
	}
	fs, o = NewMain(io.Discard, io.Discard).serveFlags()
	if err := fs.Parse([]string{"--upstream", "http://u", "--scope-header", "X-Tenant", "--trust-scope-header", "--credential-headers", "X-Session"}); err != nil {
		t.Fatal(err)
	}
	if spec, err = o.check(); err != nil {
		t.Fatal(err)
	}
	if scope, err := spec.cfg.Scope(r); err != nil || scope != "tenant:acme" || fmt.Sprint(spec.cfg.CredentialHeaders) != "[X-Session]" {
		t.Fatalf("trusted scope = %q, %v (credential headers %v); want the header alone", scope, err, spec.cfg.CredentialHeaders)
	}

	env["IDEM_WAIT"] = "soon"
	fs, _ = NewMain(io.Discard, io.Discard).serveFlags()
	if err := cli.ApplyEnv(fs, lookup); err == nil || !strings.Contains(err.Error(), "IDEM_WAIT") || !strings.Contains(err.Error(), "--wait") {
		t.Fatalf("bad environment value: %v, want an error naming $IDEM_WAIT and --wait", err)
	}
}

// failingStore is an idem.Store whose backend is down.
type failingStore struct{ idem.Store }

func (failingStore) Claim(context.Context, idem.Claim) (idem.Result, error) {
	return idem.Result{}, &idem.BackendError{Backend: "postgres", Op: "claim",
		Err: fmt.Errorf("failed to connect to `user=app database=orders`: 10.0.0.5:5432: %w", syscall.ECONNREFUSED)}
}

func TestServeHealthz(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(adminHandler(prometheus.NewRegistry(), gateway.StoreHealth(failingStore{}, slog.New(slog.DiscardHandler), cli.ReasonOf)))
	defer srv.Close()
	r := send(t, "GET", srv.URL+"/healthz", "", "")
	if r.status != http.StatusServiceUnavailable || !bytes.Contains(r.body, []byte("connection refused")) ||
		bytes.Contains(r.body, []byte("10.0.0.5")) || bytes.Contains(r.body, []byte("orders")) {
		t.Fatalf("/healthz with a failing store: %d %q, want 503 naming the failure without its address or database", r.status, r.body)
	}
}
