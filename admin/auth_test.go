package admin_test

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/admin"
)

const evictBody = `{"scope":"t1","id":"k1","reason":"stuck since the deploy"}`

func TestAuthMatrix(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, method, target, token, body string
		status                            int
		typ                               string
	}{
		{"GET without token", "GET", "/api/stores", "", "", 401, admin.ProblemUnauthorized},
		{"GET with wrong token", "GET", "/api/stores", "wrong-token-0123456789abcdef", "", 401, admin.ProblemUnauthorized},
		{"GET with token prefix", "GET", "/api/stores", fullToken[:20], "", 401, admin.ProblemUnauthorized},
		{"GET with read token", "GET", "/api/stores", readToken, "", 200, ""},
		{"GET with full token", "GET", "/api/stores", fullToken, "", 200, ""},
		{"POST without token", "POST", "/api/keys/evict", "", evictBody, 401, admin.ProblemUnauthorized},
		{"POST with wrong token", "POST", "/api/keys/evict", "x", evictBody, 401, admin.ProblemUnauthorized},
		{"POST with read token", "POST", "/api/keys/evict", readToken, evictBody, 403, admin.ProblemForbidden},
		{"POST with full token", "POST", "/api/keys/evict", fullToken, evictBody, 200, ""},
		{"full=1 with read token", "GET", "/api/key?scope=t1&id=k1&full=1", readToken, "", 403, admin.ProblemForbidden},
		{"full=1 with full token", "GET", "/api/key?scope=t1&id=k1&full=1", fullToken, "", 200, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, nil)
			b.ins.put(idem.Record{Key: idem.Key{Scope: "t1", ID: "k1"}, State: idem.StateCompleted, Token: 5, Result: []byte("ok")})
			w := b.do(t, tc.method, tc.target, tc.token, tc.body)
			if tc.status == 200 {
				wantJSON(t, w, &map[string]any{})
				return
			}
			wantProblem(t, w, tc.status, tc.typ)
			if got := w.Header().Get("WWW-Authenticate"); (tc.status == 401) != strings.HasPrefix(got, "Bearer") {
				t.Errorf("WWW-Authenticate %q with status %d", got, tc.status)
			}
		})
	}
}

func TestAuthSchemes(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	for _, h := range []string{fullToken, "Basic " + fullToken, "Bearer", "Bearer ", "bearer " + fullToken} {
		r := httptest.NewRequest("GET", "/api/stores", nil)
		r.Header.Set("Authorization", h)
		w := b.serve(r)
		if want := h == "bearer "+fullToken; (w.Code == 200) != want {
			t.Errorf("Authorization %q: status %d", h, w.Code)
		}
	}
}

func TestConfigRefused(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		cfg   admin.Config
		field string
	}{
		{admin.Config{}, "Config.Token"},
		{admin.Config{Token: "short"}, "Config.Token"},
		{admin.Config{Token: fullToken, ReadToken: "short"}, "Config.ReadToken"},
		{admin.Config{Token: fullToken, ReadToken: fullToken}, "Config.ReadToken"},
		{admin.Config{Token: fullToken, Timeout: -1}, "Config.Timeout"},
		{admin.Config{Token: fullToken, Stores: map[string]idem.Inspector{"a b": &fakeInspector{}}}, "Config.Stores"},
		{admin.Config{Token: fullToken, Stores: map[string]idem.Inspector{"main": nil}}, "Config.Stores"},
	} {
		_, err := admin.New(tc.cfg)
		var ie *idem.InputError
		if !errors.As(err, &ie) || ie.Field != tc.field {
			t.Errorf("New(%+v) = %v, want an InputError on %s", tc.cfg, err, tc.field)
		}
	}
	if _, err := admin.New(admin.Config{Insecure: true}); err != nil {
		t.Errorf("New with Insecure: %v", err)
	}
}

func TestCheckListen(t *testing.T) {
	t.Parallel()
	open := admin.Config{Insecure: true}
	for addr, ok := range map[string]bool{
		"127.0.0.1:8080": true, "[::1]:8080": true, "localhost:8080": true, "127.0.0.2:1": true,
		":8080": false, "0.0.0.0:8080": false, "[::]:8080": false, "10.0.0.1:8080": false, "example.com:80": false, "nonsense": false,
	} {
		err := admin.CheckListen(addr, open)
		if (err == nil) != ok {
			t.Errorf("CheckListen(%q) without token = %v", addr, err)
		}
		if err != nil && !errors.Is(err, idem.ErrInvalid) {
			t.Errorf("CheckListen(%q) = %v, not an InputError", addr, err)
		}
		if err := admin.CheckListen(addr, admin.Config{Token: fullToken}); err != nil {
			t.Errorf("CheckListen(%q) with a token = %v", addr, err)
		}
	}
}

// TestInsecureLoopbackOnly: without a token, a request addressed to another host
// (a DNS-rebound page in a browser on the operator's machine) is refused.
func TestInsecureLoopbackOnly(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *admin.Config) { c.Token, c.ReadToken, c.Insecure = "", "", true })
	for host, want := range map[string]int{"127.0.0.1:9090": 200, "localhost": 200, "[::1]:1": 200, "evil.example:9090": 403, "example.com": 403} {
		r := httptest.NewRequest("GET", "/api/stores", nil)
		r.Host = host
		if w := b.serve(r); w.Code != want {
			t.Errorf("Host %q: status %d, want %d", host, w.Code, want)
		}
	}
	r := httptest.NewRequest("POST", "/api/keys/evict", strings.NewReader(evictBody))
	r.Host = "127.0.0.1:9090"
	r.Header.Set("Content-Type", "application/json")
	wantProblem(t, b.serve(r), 404, admin.ProblemNotFound, `scope="t1"`)
}

func TestCrossSiteRefused(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		headers map[string]string
		status  int
	}{
		{"Sec-Fetch-Site cross-site", map[string]string{"Sec-Fetch-Site": "cross-site"}, 403},
		{"Sec-Fetch-Site same-site", map[string]string{"Sec-Fetch-Site": "same-site"}, 403},
		{"foreign Origin", map[string]string{"Origin": "https://evil.example"}, 403},
		{"same-origin", map[string]string{"Sec-Fetch-Site": "same-origin"}, 404},
		{"Origin of the host", map[string]string{"Origin": "http://admin.local"}, 404},
		{"no browser headers", nil, 404},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, nil)
			r := httptest.NewRequest("POST", "http://admin.local/api/keys/evict", strings.NewReader(evictBody))
			r.Header.Set("Content-Type", "application/json")
			r.Header.Set("Authorization", "Bearer "+fullToken)
			for k, v := range tc.headers {
				r.Header.Set(k, v)
			}
			w := b.serve(r)
			if w.Code != tc.status {
				t.Fatalf("status %d, want %d: %s", w.Code, tc.status, w.Body)
			}
			if tc.status == 403 {
				wantProblem(t, w, 403, admin.ProblemForbidden, "cross-site")
			}
		})
	}
}

func TestMutationBody(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	// No Content-Type: a form post from a page cannot reach the handler.
	r := httptest.NewRequest("POST", "/api/keys/evict", strings.NewReader(evictBody))
	r.Header.Set("Authorization", "Bearer "+fullToken)
	wantProblem(t, b.serve(r), 415, admin.ProblemUnsupportedMediaType, "application/json")
	r = httptest.NewRequest("POST", "/api/keys/evict", strings.NewReader(evictBody))
	r.Header.Set("Authorization", "Bearer "+fullToken)
	r.Header.Set("Content-Type", "text/plain")
	wantProblem(t, b.serve(r), 415, admin.ProblemUnsupportedMediaType)

	big := `{"scope":"t1","id":"k1","reason":"` + strings.Repeat("x", admin.MaxBodyBytes) + `"}`
	wantProblem(t, b.do(t, "POST", "/api/keys/evict", fullToken, big), 413, admin.ProblemBodyTooLarge, "65536")

	for body, detail := range map[string]string{
		`{"scope":"t1","id":"k1","reason":"r","forse":true}`: "forse",
		`{"scope":"t1","id":"k1","reason":"r"} {}`:           "after the JSON object",
		`[1]`:                      "body",
		`{"scope":"t1","id":"k1"}`: "reason is empty",
		`{"scope":"t1","id":"k1","reason":"a\u0000"}`: "reason has a control character",
	} {
		wantProblem(t, b.do(t, "POST", "/api/keys/evict", fullToken, body), 400, admin.ProblemInvalid, detail)
	}
	r = httptest.NewRequest("POST", "/api/keys/evict", nil)
	r.Header.Set("Authorization", "Bearer "+fullToken)
	r.Header.Set("Content-Type", "application/json")
	wantProblem(t, b.serve(r), 400, admin.ProblemInvalid, "body is empty")
}

func TestNoRouteAndNotConfigured(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *admin.Config) { c.Outbox, c.Stream = nil, nil })
	wantProblem(t, b.do(t, "GET", "/api/nothing", fullToken, ""), 404, admin.ProblemNoRoute, "/api/nothing")
	wantProblem(t, b.do(t, "DELETE", "/api/keys", fullToken, ""), 404, admin.ProblemNoRoute, "DELETE")
	// Routes still need a token, so an unauthenticated caller learns nothing.
	wantProblem(t, b.do(t, "GET", "/api/nothing", "", ""), 401, admin.ProblemUnauthorized)
	wantProblem(t, b.do(t, "GET", "/api/outbox", readToken, ""), 404, admin.ProblemNotConfigured, "outbox")
	wantProblem(t, b.do(t, "POST", "/api/outbox/parked/7/retry", fullToken, `{"reason":"r"}`), 404, admin.ProblemNotConfigured)

	var idx admin.Index
	wantJSON(t, b.do(t, "GET", "/api/", readToken, ""), &idx)
	want := map[string]bool{"keys": true, "deadletters": true, "outbox": false, "effects": true, "sagas": true, "stream": false, "metrics": true, "audit": true, "queue": true}
	if len(idx.Areas) != len(want) || idx.Access != "read" {
		t.Fatalf("index %+v", idx)
	}
	for a, ok := range want {
		if idx.Areas[a] != ok {
			t.Errorf("area %s configured = %v, want %v", a, idx.Areas[a], ok)
		}
	}
}

func TestConsoleMounted(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *admin.Config) {
		c.Console = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("console")) })
	})
	if w := b.do(t, "GET", "/index.html", "", ""); w.Code != 200 || w.Body.String() != "console" {
		t.Fatalf("console: %d %s", w.Code, w.Body)
	}
	wantProblem(t, b.do(t, "GET", "/api/stores", "", ""), 401, admin.ProblemUnauthorized)
}

func TestMetrics(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	b.do(t, "GET", "/api/stores", readToken, "")
	b.do(t, "GET", "/api/stores", readToken, "")
	b.do(t, "GET", "/api/stores", "", "")
	b.do(t, "GET", "/api/nowhere", readToken, "")
	for _, tc := range []struct {
		route, code string
		want        float64
	}{{"GET /api/stores", "200", 2}, {"GET /api/stores", "401", 1}, {"other", "404", 1}} {
		got := counter(t, b, tc.route, tc.code)
		if got != tc.want {
			t.Errorf("idem_admin_requests_total{route=%q,code=%q} = %v, want %v", tc.route, tc.code, got, tc.want)
		}
	}
	// A second handler on the same registry shares the counter.
	b2 := setup(t, func(c *admin.Config) { c.Registerer = b.reg })
	b2.h.ServeHTTP(httptest.NewRecorder(), authed("GET", "/api/stores", readToken))
	if got := counter(t, b, "GET /api/stores", "200"); got != 3 {
		t.Errorf("after a second handler's request: %v, want 3", got)
	}
}

func authed(method, target, token string) *http.Request {
	r := httptest.NewRequest(method, target, nil)
	r.Header.Set("Authorization", "Bearer "+token)
	return r
}

// TestConcurrentRequests: one handler serves reads and evictions from many
// goroutines; every request is answered and counted once.
func TestConcurrentRequests(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	const workers, each = 8, 25
	for i := range workers * each {
		b.ins.put(idem.Record{Key: idem.Key{Scope: "t1", ID: fmt.Sprint(i)}, State: idem.StateCompleted})
	}
	var wg sync.WaitGroup
	codes := make(chan int, 2*workers*each)
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				id := fmt.Sprint(w*each + i)
				codes <- b.do(t, "GET", "/api/key?scope=t1&id="+id, readToken, "").Code
				codes <- b.do(t, "POST", "/api/keys/evict", fullToken, `{"scope":"t1","id":"`+id+`","reason":"load"}`).Code
			}
		})
	}
	wg.Wait()
	close(codes)
	for c := range codes {
		if c != 200 {
			t.Fatalf("status %d", c)
		}
	}
	if got := counter(t, b, "POST /api/keys/evict", "200"); got != workers*each {
		t.Errorf("evictions counted %v, want %d", got, workers*each)
	}
	if n := len(b.auditRecords(t)); n != workers*each {
		t.Errorf("%d audit records, want %d", n, workers*each)
	}
}
