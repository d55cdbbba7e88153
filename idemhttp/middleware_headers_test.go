package idemhttp_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/idemhq/idem/idemhttp"
	"github.com/idemhq/idem/idemkey"
)

func TestMiddlewareReplayHeaders(t *testing.T) {
	t.Parallel()
	handler := func() *mwCounter {
		return &mwCounter{fn: func(w http.ResponseWriter, _ *http.Request, _ []byte) {
			h := w.Header()
			h.Set("Content-Type", "application/json")
			h.Set("X-Order-Id", "ord_42")
			h.Add("Link", "</a>; rel=a")
			h.Add("Link", "</b>; rel=b")
			h.Set("Set-Cookie", "csrf=first")
			h.Set("Alt-Svc", `h3=":443"`)
			h.Set("Connection", "X-Hop")
			h.Set("X-Hop", "hop-by-hop")
			w.WriteHeader(http.StatusCreated)
			w.Write([]byte(`{"id":"ord_42"}`))
		}}
	}
	// outer is a middleware in front of idem's that sets a header per attempt.
	outer := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("X-Request-Id", r.Header.Get("X-Attempt"))
			next.ServeHTTP(w, r)
		})
	}
	for _, tc := range []struct {
		name              string
		allow             []string
		replayed, dropped []string
	}{
		{"default", nil, []string{"Content-Type", "X-Order-Id", "Link"}, []string{"Set-Cookie", "Alt-Svc", "X-Hop", "Connection"}},
		{"allow-list", []string{"Content-Type", "Set-Cookie", "Transfer-Encoding"}, []string{"Content-Type", "Set-Cookie"}, []string{"X-Order-Id", "Link"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := handler()
			mw := mwMust(idemhttp.Middleware(idemhttp.Config{Store: mwMemStore(t), ReplayHeaders: tc.allow}))(t)
			srv := mwServeHandler(t, outer(mw(h)))
			key := idemkey.NewV7()
			first := mwDo(t, "POST", srv.URL+"/orders", key, nil, "X-Attempt: 1")
			again := mwDo(t, "POST", srv.URL+"/orders", key, nil, "X-Attempt: 2")
			if again.header.Get(idemhttp.HeaderReplayed) != "true" || string(again.body) != string(first.body) || h.runs.Load() != 1 {
				t.Fatalf("not replayed: %d %q", again.status, again.body)
			}
			for _, name := range tc.replayed {
				if got, want := strings.Join(again.header.Values(name), "|"), strings.Join(first.header.Values(name), "|"); got != want || want == "" {
					t.Errorf("%s replayed as %q, want %q", name, got, want)
				}
			}
			for _, name := range tc.dropped {
				if v := again.header.Values(name); len(v) > 0 {
					t.Errorf("%s replayed as %q, want it dropped", name, v)
				}
			}
			// The outer middleware's header belongs to each attempt.
			if first.header.Get("X-Request-Id") != "1" || again.header.Get("X-Request-Id") != "2" {
				t.Errorf("X-Request-Id %q then %q, want each attempt's own", first.header.Get("X-Request-Id"), again.header.Get("X-Request-Id"))
			}
		})
	}
}

// Response headers count toward a bound of their own: a response with more header
// bytes than can be stored is treated like a body too large to store.
func TestMiddlewareStoredHeadersAreBounded(t *testing.T) {
	t.Parallel()
	h := &mwCounter{fn: func(w http.ResponseWriter, _ *http.Request, _ []byte) {
		v := strings.Repeat("v", 1000)
		for i := range idemhttp.MaxStoredHeaderBytes / 1000 {
			w.Header().Add("X-Many", v+string(rune('a'+i%26)))
		}
		w.Write([]byte("ok"))
	}}
	srv := mwServe(t, idemhttp.Config{Store: mwMemStore(t)}, h)
	key := idemkey.NewV7()
	if r := mwDo(t, "POST", srv.URL+"/x", key, nil); r.status != 200 || string(r.body) != "ok" {
		t.Fatalf("first: %d %q", r.status, r.body)
	}
	r := mwDo(t, "POST", srv.URL+"/x", key, nil)
	mwProblem(t, r, http.StatusInternalServerError, "too large to store")
	if n := h.runs.Load(); n != 1 {
		t.Errorf("handler ran %d times, want 1", n)
	}
}
