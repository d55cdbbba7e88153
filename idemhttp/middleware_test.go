package idemhttp_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemhttp"
	"github.com/idemhq/idem/idemkey"
	"github.com/idemhq/idem/idemmem"
	"github.com/idemhq/idem/idempg"
	"github.com/idemhq/idem/idemredis"
	"github.com/idemhq/idem/idemsqlite"
	"github.com/idemhq/idem/idemtest"
	"github.com/idemhq/idem/internal/testsvc"
)

// mwStores are the real stores every middleware behaviour is checked against.
var mwStores = []struct {
	name string
	open func(t *testing.T) idem.Store
}{
	{"memory", func(t *testing.T) idem.Store { return mwMust(idemmem.New(idemmem.Config{}))(t) }},
	{"sqlite", func(t *testing.T) idem.Store { return mwSQLite(t) }},
	{"postgres", func(t *testing.T) idem.Store {
		return mwMust(idempg.New(context.Background(), testsvc.PostgresPool(t), idempg.Config{}))(t)
	}},
	{"redis", func(t *testing.T) idem.Store {
		prefix := testsvc.RedisPrefix(t)
		client := redis.NewClient(&redis.Options{Addr: testsvc.RedisAddr()})
		t.Cleanup(func() { client.Close() })
		return mwMust(idemredis.New(client, idemredis.Config{Prefix: prefix}))(t)
	}},
}

// mwSQLite opens a SQLite store in a fresh file, closed when t ends.
func mwSQLite(t *testing.T) *idemsqlite.Store {
	s := mwMust(idemsqlite.Open(context.Background(), filepath.Join(t.TempDir(), "idem.db"), idemsqlite.Config{}))(t)
	t.Cleanup(func() { s.Close() })
	return s
}

// mwMust(f())(t) is f's value, or the test fails with f's error.
func mwMust[T any](v T, err error) func(testing.TB) T {
	return func(t testing.TB) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}

// mwServe serves h behind the middleware of cfg on a real loopback server.
func mwServe(t testing.TB, cfg idemhttp.Config, h http.Handler) *httptest.Server {
	t.Helper()
	mw := mwMust(idemhttp.Middleware(cfg))(t)
	return mwServeHandler(t, mw(h))
}

func mwServeHandler(t testing.TB, h http.Handler) *httptest.Server {
	srv := httptest.NewUnstartedServer(h)
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // handler panics are expected in some tests
	srv.Start()
	t.Cleanup(srv.Close)
	return srv
}

// mwMetric waits for idem_http_requests_total{outcome} to reach want: the middleware
// counts a request after its response is written, so the client may be first.
func mwMetric(t testing.TB, reg prometheus.Gatherer, outcome string, want float64) {
	t.Helper()
	labels := map[string]string{"outcome": outcome}
	names := []string{"idem_http_requests_total", "idem_http_request_duration_seconds"}
	// Both are recorded after the response has gone out, one after the other.
	testsvc.Eventually(t, time.Minute, "idem_http_requests_total and _duration_seconds{outcome="+outcome+"} to reach the count", func() bool {
		return idemtest.MetricValue(t, reg, names[0], labels) >= want && idemtest.MetricValue(t, reg, names[1], labels) >= want
	})
	for _, name := range names {
		if got := idemtest.MetricValue(t, reg, name, labels); got != want {
			t.Errorf("%s{outcome=%q} = %v, want %v", name, outcome, got, want)
		}
	}
}

type mwResp struct {
	status int
	header http.Header
	body   []byte
}

// mwDo sends method url with the key (none if empty) and extra headers given as
// "Name: value" strings.
func mwDo(t testing.TB, method, url, key string, body []byte, headers ...string) mwResp {
	t.Helper()
	req, err := http.NewRequest(method, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set(idemhttp.HeaderKey, key)
	}
	for _, h := range headers {
		name, value, _ := strings.Cut(h, ":")
		req.Header.Add(name, strings.TrimPrefix(value, " "))
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return mwResp{resp.StatusCode, resp.Header, b}
}

// mwProblem checks that r is an RFC 9457 problem with status and a detail naming
// the problem (containing want).
func mwProblem(t testing.TB, r mwResp, status int, want string) {
	t.Helper()
	var p struct {
		Type, Title, Detail string
		Status              int
	}
	if r.status != status || r.header.Get("Content-Type") != idemhttp.ContentTypeProblem {
		t.Fatalf("got %d %q (%s), want %d application/problem+json", r.status, r.header.Get("Content-Type"), r.body, status)
	}
	if err := json.Unmarshal(r.body, &p); err != nil || p.Type == "" || p.Title == "" || p.Status != status {
		t.Fatalf("problem body %s: %v", r.body, err)
	}
	if !strings.Contains(p.Detail, want) {
		t.Errorf("detail %q does not name the problem %q", p.Detail, want)
	}
	if r.header.Get(idemhttp.HeaderReplayed) != "" {
		t.Errorf("a problem of the middleware is marked replayed")
	}
}

// mwCounter is a handler that counts its runs and answers with fn.
type mwCounter struct {
	runs atomic.Int64
	fn   func(w http.ResponseWriter, r *http.Request, body []byte)
}

func (h *mwCounter) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.runs.Add(1)
	body, _ := io.ReadAll(r.Body)
	h.fn(w, r, body)
}

func mwEcho(status int) *mwCounter {
	return &mwCounter{fn: func(w http.ResponseWriter, r *http.Request, body []byte) {
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(status)
		w.Write(append([]byte(r.Method+" "+r.URL.Path+" "), body...))
	}}
}

func TestMiddlewareReplaysByteForByte(t *testing.T) {
	t.Parallel()
	body := make([]byte, 10000) // binary, and beyond net/http's chunking buffer
	for i := range body {
		body[i] = byte(i * 7)
	}
	for _, st := range mwStores {
		t.Run(st.name, func(t *testing.T) {
			t.Parallel()
			reg := prometheus.NewRegistry()
			h := &mwCounter{fn: func(w http.ResponseWriter, r *http.Request, _ []byte) {
				w.Header().Set("Content-Type", "application/octet-stream")
				w.Header().Set("Location", "/orders/1")
				w.Header()["Cache-Control"] = []string{"private", "max-age=60"}
				w.Header().Set("X-Order-Id", "42")
				w.Header().Set("Set-Cookie", "session=first-attempt-only")
				w.WriteHeader(http.StatusCreated)
				w.Write(body[:100])
				w.Write(body[100:])
			}}
			srv := mwServe(t, idemhttp.Config{Store: st.open(t), Registerer: reg}, h)
			key := idemkey.NewV7()
			first := mwDo(t, "POST", srv.URL+"/orders", key, []byte(`{"qty":1}`))
			again := mwDo(t, "POST", srv.URL+"/orders", key, []byte(`{"qty":1}`))
			for i, r := range []mwResp{first, again} {
				if r.status != http.StatusCreated || !bytes.Equal(r.body, body) {
					t.Fatalf("response %d: %d, %d bytes; want 201 and the %d bytes", i, r.status, len(r.body), len(body))
				}
				for _, name := range []string{"Content-Type", "Location", "Cache-Control", "Content-Length", "X-Order-Id"} {
					if got, want := r.header.Values(name), first.header.Values(name); strings.Join(got, "|") != strings.Join(want, "|") || len(got) == 0 {
						t.Errorf("response %d: %s = %q, want %q", i, name, got, want)
					}
				}
			}
			if first.header.Get(idemhttp.HeaderReplayed) != "" || again.header.Get(idemhttp.HeaderReplayed) != "true" {
				t.Errorf("Idempotent-Replayed: first %q, replay %q", first.header.Get(idemhttp.HeaderReplayed), again.header.Get(idemhttp.HeaderReplayed))
			}
			if first.header.Get("Set-Cookie") == "" || again.header.Get("Set-Cookie") != "" {
				t.Errorf("Set-Cookie must reach the first client only")
			}
			if n := h.runs.Load(); n != 1 {
				t.Errorf("handler ran %d times, want 1", n)
			}
			mwMetric(t, reg, "executed", 1)
			mwMetric(t, reg, "replayed", 1)
			mwMetric(t, reg, "conflict", 0)
		})
	}
}

func TestMiddlewareMismatch(t *testing.T) {
	t.Parallel()
	for _, st := range mwStores {
		t.Run(st.name, func(t *testing.T) {
			t.Parallel()
			h := mwEcho(http.StatusOK)
			srv := mwServe(t, idemhttp.Config{Store: st.open(t), FingerprintHeaders: []string{"x-account"}}, h)
			key := idemkey.NewV7()
			if r := mwDo(t, "POST", srv.URL+"/pay?to=bob", key, []byte("10"), "X-Account: a"); r.status != 200 {
				t.Fatalf("first: %d %s", r.status, r.body)
			}
			for name, r := range map[string]mwResp{
				"body":   mwDo(t, "POST", srv.URL+"/pay?to=bob", key, []byte("11"), "X-Account: a"),
				"header": mwDo(t, "POST", srv.URL+"/pay?to=bob", key, []byte("10"), "X-Account: b"),
				"path":   mwDo(t, "POST", srv.URL+"/refund?to=bob", key, []byte("10"), "X-Account: a"),
				"query":  mwDo(t, "POST", srv.URL+"/pay?to=eve", key, []byte("10"), "X-Account: a"),
				"method": mwDo(t, "PATCH", srv.URL+"/pay?to=bob", key, []byte("10"), "X-Account: a"),
			} {
				t.Run(name, func(t *testing.T) { mwProblem(t, r, http.StatusUnprocessableEntity, "different request") })
			}
			if r := mwDo(t, "POST", srv.URL+"/pay?to=bob", key, []byte("10"), "X-Account: a", "X-Other: ignored"); r.status != 200 || r.header.Get(idemhttp.HeaderReplayed) != "true" {
				t.Errorf("the same request again: %d, replayed %q", r.status, r.header.Get(idemhttp.HeaderReplayed))
			}
			if n := h.runs.Load(); n != 1 {
				t.Errorf("handler ran %d times, want 1", n)
			}
		})
	}
}

// mwCountingStore counts the claims that found their key in progress, so a test
// can hold the first request until every duplicate has seen it running.
type mwCountingStore struct {
	idem.Store
	inProgress atomic.Int64
}

func (s *mwCountingStore) Claim(ctx context.Context, c idem.Claim) (idem.Result, error) {
	res, err := s.Store.Claim(ctx, c)
	if err == nil && res.Outcome == idem.InProgress {
		s.inProgress.Add(1)
	}
	return res, err
}

func TestMiddlewareConcurrentDuplicatesRunOnce(t *testing.T) {
	t.Parallel()
	const n = 100
	for _, st := range mwStores {
		for _, wait := range []time.Duration{0, time.Minute} {
			t.Run(st.name+"/wait="+wait.String(), func(t *testing.T) {
				t.Parallel()
				store := &mwCountingStore{Store: st.open(t)}
				release := make(chan struct{})
				h := &mwCounter{fn: func(w http.ResponseWriter, _ *http.Request, body []byte) {
					select {
					case <-release:
					case <-time.After(time.Minute):
						t.Error("the duplicates never all arrived")
					}
					w.Write(body)
				}}
				srv := mwServe(t, idemhttp.Config{Store: store, Wait: wait}, h)
				key := idemkey.NewV7()
				results := make(chan mwResp, n)
				var conflicts atomic.Int64
				var wg sync.WaitGroup
				for range n {
					wg.Go(func() {
						r := mwDo(t, "POST", srv.URL+"/jobs", key, []byte("job"))
						if r.status == http.StatusConflict && conflicts.Add(1) == n-1 {
							close(release) // without Wait: every duplicate was refused
						}
						results <- r
					})
				}
				if wait > 0 {
					testsvc.Eventually(t, time.Minute, "the other requests to find the key in progress", func() bool { return store.inProgress.Load() >= n-1 })
					close(release) // with Wait: every duplicate is waiting
				}
				wg.Wait()
				close(results)
				replayed := 0
				for r := range results {
					switch {
					case r.status == http.StatusConflict && wait == 0:
						mwProblem(t, r, http.StatusConflict, "still being processed")
						if r.header.Get("Retry-After") == "" || r.header.Get("Retry-After") == "0" {
							t.Errorf("409 without a positive Retry-After: %q", r.header.Get("Retry-After"))
						}
					case r.status == http.StatusOK && string(r.body) == "job":
						if r.header.Get(idemhttp.HeaderReplayed) == "true" {
							replayed++
						}
					default:
						t.Errorf("unexpected response %d %s", r.status, r.body)
					}
				}
				if runs := h.runs.Load(); runs != 1 {
					t.Errorf("handler ran %d times for %d identical requests, want 1", runs, n)
				}
				if wait > 0 && replayed != n-1 {
					t.Errorf("%d replays, want %d", replayed, n-1)
				}
			})
		}
	}
}

func TestMiddlewareTenantIsolation(t *testing.T) {
	t.Parallel()
	for _, st := range mwStores {
		for _, tc := range []struct {
			name   string
			scope  func(*http.Request) (string, error)
			header string // carries the tenant
		}{
			{"HeaderScope", idemhttp.HeaderScope("X-Tenant"), "X-Tenant"},
			{"TrustedHeaderScope", idemhttp.TrustedHeaderScope("X-Tenant"), "X-Tenant"},
			{"default/Authorization", nil, "Authorization"},
			{"default/Cookie", nil, "Cookie"},
			{"default/X-Api-Key", nil, "X-Api-Key"},
			{"AuthorizationScope", idemhttp.AuthorizationScope, "Authorization"},
		} {
			t.Run(st.name+"/"+tc.name, func(t *testing.T) {
				t.Parallel()
				h := &mwCounter{fn: func(w http.ResponseWriter, r *http.Request, _ []byte) {
					w.Write([]byte("balance of " + r.Header.Get(tc.header)))
				}}
				srv := mwServe(t, idemhttp.Config{Store: st.open(t), Scope: tc.scope}, h)
				key := idemkey.NewV7() // both tenants send the same key and body
				for _, tenant := range []string{"alice", "bob", "alice", "bob"} {
					r := mwDo(t, "POST", srv.URL+"/balance", key, nil, tc.header+": "+tenant)
					if r.status != 200 || string(r.body) != "balance of "+tenant {
						t.Fatalf("tenant %s got %d %q", tenant, r.status, r.body)
					}
				}
				if n := h.runs.Load(); n != 2 {
					t.Errorf("handler ran %d times, want once per tenant", n)
				}
				r := mwDo(t, "POST", srv.URL+"/balance", key, nil)
				if strings.HasSuffix(tc.name, "HeaderScope") {
					mwProblem(t, r, http.StatusBadRequest, "X-Tenant")
				} else if r.status != 200 || string(r.body) != "balance of " {
					t.Errorf("anonymous caller got %d %q, want its own response", r.status, r.body)
				}
			})
		}
	}
}

func TestMiddlewareSafeMethodsUntouched(t *testing.T) {
	t.Parallel()
	h := mwEcho(http.StatusOK)
	srv := mwServe(t, idemhttp.Config{Store: mwMust(idemmem.New(idemmem.Config{}))(t), RequireKey: true}, h)
	key := idemkey.NewV7()
	for _, method := range []string{"GET", "PUT", "DELETE", "OPTIONS", "GET", "PUT", "DELETE", "OPTIONS"} {
		for _, k := range []string{key, "", "bad\tkey"} {
			r := mwDo(t, method, srv.URL+"/items/1", k, []byte("x"))
			if r.status != 200 || r.header.Get(idemhttp.HeaderReplayed) != "" {
				t.Errorf("%s with key %q: %d, replayed %q", method, k, r.status, r.header.Get(idemhttp.HeaderReplayed))
			}
		}
	}
	if n := h.runs.Load(); n != 24 {
		t.Errorf("handler ran %d times for 24 requests", n)
	}
}
