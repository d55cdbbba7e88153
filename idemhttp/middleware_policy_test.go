package idemhttp_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemhttp"
	"github.com/idemhq/idem/idemkey"
	"github.com/idemhq/idem/idemmem"
	"github.com/idemhq/idem/idemredis"
	"github.com/idemhq/idem/internal/testsvc"
)

// mwFreshConn sends each request on a new connection. net/http's client resends a
// request with an Idempotency-Key by itself when a reused connection breaks, as a
// panicking handler's does; tests of the panic itself must see the broken one.
var mwFreshConn = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}

func mwMemStore(t testing.TB) idem.Store { return mwMust(idemmem.New(idemmem.Config{}))(t) }

func TestMiddlewareKeyErrors(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	h := mwEcho(http.StatusOK)
	srv := mwServe(t, idemhttp.Config{Store: mwMemStore(t), RequireKey: true, Registerer: reg}, h)
	for _, tc := range []struct{ name, key, header, want string }{
		{"empty", "", "Idempotency-Key: ", "is empty"},
		{"256 characters", strings.Repeat("k", 256), "", "longer than 255 characters (got 256)"},
		{"non-ASCII", "clé-1", "", "byte 0xC3 at byte 2, which is not printable ASCII"},
		{"control character", "key\tone", "", "byte 0x09 at byte 3"},
		{"sent twice", "a", "Idempotency-Key: b", "sent 2 times"},
		{"missing with RequireKey", "", "", "is missing"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var extra []string
			if tc.header != "" {
				extra = append(extra, tc.header)
			}
			mwProblem(t, mwDo(t, "POST", srv.URL+"/orders", tc.key, []byte("{}"), extra...), http.StatusBadRequest, tc.want)
		})
	}
	if n := h.runs.Load(); n != 0 {
		t.Errorf("handler ran %d times for refused keys", n)
	}
	mwMetric(t, reg, "rejected", 6)
	// 255 characters is the longest key, and a valid one.
	if r := mwDo(t, "POST", srv.URL+"/orders", strings.Repeat("k", 255), []byte("{}")); r.status != 200 {
		t.Errorf("255-character key: %d %s", r.status, r.body)
	}
}

func TestMiddlewareOversizeRequest(t *testing.T) {
	t.Parallel()
	big := bytes.Repeat([]byte("0123456789"), 200) // 2000 bytes > 1024
	for _, tc := range []struct {
		name    string
		policy  idemhttp.Oversize
		chunked bool
	}{
		{"Reject413", idemhttp.Reject413, false},
		{"Reject413/chunked", idemhttp.Reject413, true},
		{"PassThrough", idemhttp.PassThrough, false},
		{"PassThrough/chunked", idemhttp.PassThrough, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := &mwCounter{fn: func(w http.ResponseWriter, _ *http.Request, body []byte) {
				if !bytes.Equal(body, big) {
					t.Errorf("handler got %d bytes, want the whole %d", len(body), len(big))
				}
			}}
			srv := mwServe(t, idemhttp.Config{Store: mwMemStore(t), MaxBodyBytes: 1024, Oversize: tc.policy}, h)
			key := idemkey.NewV7()
			for range 2 {
				var body io.Reader = bytes.NewReader(big)
				if tc.chunked {
					body = io.MultiReader(body) // no length known: sent chunked
				}
				req, _ := http.NewRequest("POST", srv.URL+"/upload", body)
				req.Header.Set(idemhttp.HeaderKey, key)
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				r := mwResp{resp.StatusCode, resp.Header, b}
				if tc.policy == idemhttp.Reject413 {
					mwProblem(t, r, http.StatusRequestEntityTooLarge, "larger than 1024 bytes")
				} else if r.status != 200 || r.header.Get(idemhttp.HeaderReplayed) != "" {
					t.Errorf("pass-through: %d, replayed %q", r.status, r.header.Get(idemhttp.HeaderReplayed))
				}
			}
			if want := map[idemhttp.Oversize]int64{idemhttp.Reject413: 0, idemhttp.PassThrough: 2}[tc.policy]; h.runs.Load() != want {
				t.Errorf("handler ran %d times, want %d", h.runs.Load(), want)
			}
		})
	}
}

// A response too large to store reaches its client whole, and the key keeps a
// marker: a retry is told the response cannot be replayed, and the handler does not
// run a second time.
func TestMiddlewareOversizeResponseIsNotRunTwice(t *testing.T) {
	t.Parallel()
	big := bytes.Repeat([]byte("abcdefgh"), 1000) // 8000 bytes > 1024
	h := &mwCounter{fn: func(w http.ResponseWriter, _ *http.Request, _ []byte) {
		w.Header().Set("Content-Type", "text/plain")
		for i := 0; i < len(big); i += 500 {
			w.Write(big[i:min(i+500, len(big))])
		}
	}}
	srv := mwServe(t, idemhttp.Config{Store: mwMemStore(t), MaxBodyBytes: 1024}, h)
	key := idemkey.NewV7()
	r := mwDo(t, "POST", srv.URL+"/export", key, nil)
	if r.status != 200 || !bytes.Equal(r.body, big) || r.header.Get(idemhttp.HeaderReplayed) != "" {
		t.Fatalf("got %d, %d bytes, replayed %q; want the whole response, executed", r.status, len(r.body), r.header.Get(idemhttp.HeaderReplayed))
	}
	for range 2 {
		r = mwDo(t, "POST", srv.URL+"/export", key, nil)
		mwProblem(t, r, http.StatusInternalServerError, "too large to store")
		if !strings.Contains(string(r.body), idemhttp.ProblemResponseTooLarge) {
			t.Errorf("problem %s, want type %s", r.body, idemhttp.ProblemResponseTooLarge)
		}
	}
	if n := h.runs.Load(); n != 1 {
		t.Errorf("handler ran %d times, want 1: a response too large to store still keeps its key", n)
	}
}

func TestMiddlewareClientDisconnect(t *testing.T) {
	t.Parallel()
	for _, st := range mwStores {
		t.Run(st.name, func(t *testing.T) {
			t.Parallel()
			started, release, served := make(chan struct{}), make(chan struct{}), make(chan struct{}, 1)
			h := &mwCounter{fn: func(w http.ResponseWriter, r *http.Request, body []byte) {
				close(started)
				<-release
				if err := r.Context().Err(); err != nil {
					t.Errorf("the handler's context ended with the client: %v", err)
				}
				w.WriteHeader(http.StatusCreated)
				w.Write(append([]byte("charged "), body...))
			}}
			mw := mwMust(idemhttp.Middleware(idemhttp.Config{Store: st.open(t)}))(t)
			inner := mw(h)
			srv := mwServeHandler(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				inner.ServeHTTP(w, r)
				served <- struct{}{} // the middleware returned: the result is stored
			}))
			key := idemkey.NewV7()
			ctx, cancel := context.WithCancel(context.Background())
			req, _ := http.NewRequestWithContext(ctx, "POST", srv.URL+"/charge", strings.NewReader("42"))
			req.Header.Set(idemhttp.HeaderKey, key)
			errc := make(chan error, 1)
			go func() {
				resp, err := http.DefaultClient.Do(req)
				if err == nil {
					resp.Body.Close()
				}
				errc <- err
			}()
			<-started
			cancel()
			if err := <-errc; !errors.Is(err, context.Canceled) {
				t.Fatalf("client: %v, want context.Canceled", err)
			}
			close(release)
			<-served
			r := mwDo(t, "POST", srv.URL+"/charge", key, []byte("42"))
			if r.status != http.StatusCreated || string(r.body) != "charged 42" || r.header.Get(idemhttp.HeaderReplayed) != "true" {
				t.Errorf("retry got %d %q replayed %q, want the stored 201", r.status, r.body, r.header.Get(idemhttp.HeaderReplayed))
			}
			if n := h.runs.Load(); n != 1 {
				t.Errorf("handler ran %d times, want 1", n)
			}
		})
	}
}

func TestMiddlewareStatusPolicy(t *testing.T) {
	t.Parallel()
	no := false
	for _, st := range mwStores {
		for _, tc := range []struct {
			name         string
			status       int
			storeErrors  *bool
			wantReplayed bool
		}{
			{"500 stored by default", http.StatusInternalServerError, nil, true},
			{"503 not stored when StoreServerErrors is false", http.StatusServiceUnavailable, &no, false},
			{"429 never stored", http.StatusTooManyRequests, nil, false},
			{"404 stored", http.StatusNotFound, &no, true},
		} {
			t.Run(st.name+"/"+tc.name, func(t *testing.T) {
				t.Parallel()
				h := mwEcho(tc.status)
				srv := mwServe(t, idemhttp.Config{Store: st.open(t), StoreServerErrors: tc.storeErrors}, h)
				key := idemkey.NewV7()
				first := mwDo(t, "POST", srv.URL+"/op", key, []byte("x"))
				again := mwDo(t, "POST", srv.URL+"/op", key, []byte("x"))
				if first.status != tc.status || again.status != tc.status || !bytes.Equal(first.body, again.body) {
					t.Fatalf("got %d then %d, want %d twice", first.status, again.status, tc.status)
				}
				runs := map[bool]int64{true: 1, false: 2}[tc.wantReplayed]
				if h.runs.Load() != runs || (again.header.Get(idemhttp.HeaderReplayed) == "true") != tc.wantReplayed {
					t.Errorf("handler ran %d times, replayed %q; want %d runs", h.runs.Load(), again.header.Get(idemhttp.HeaderReplayed), runs)
				}
			})
		}
	}
}

func TestMiddlewarePanicReleasesTheKey(t *testing.T) {
	t.Parallel()
	h := &mwCounter{}
	h.fn = func(w http.ResponseWriter, _ *http.Request, _ []byte) {
		if h.runs.Load() == 1 {
			panic("handler bug")
		}
		w.Write([]byte("ok"))
	}
	srv := mwServe(t, idemhttp.Config{Store: mwMemStore(t)}, h)
	key := idemkey.NewV7()
	req, _ := http.NewRequest("POST", srv.URL+"/op", nil)
	req.Header.Set(idemhttp.HeaderKey, key)
	if resp, err := mwFreshConn.Do(req); err == nil {
		resp.Body.Close()
		t.Fatalf("a panicking handler answered %d", resp.StatusCode)
	}
	if r := mwDo(t, "POST", srv.URL+"/op", key, nil); r.status != 200 || string(r.body) != "ok" || r.header.Get(idemhttp.HeaderReplayed) != "" {
		t.Errorf("retry after the panic: %d %q replayed %q, want a fresh run", r.status, r.body, r.header.Get(idemhttp.HeaderReplayed))
	}
}

func TestMiddlewareStoreDown(t *testing.T) {
	t.Parallel()
	client := redis.NewClient(&redis.Options{Addr: testsvc.ClosedAddr(t), MaxRetries: -1})
	t.Cleanup(func() { client.Close() })
	reg := prometheus.NewRegistry()
	h := mwEcho(http.StatusOK)
	srv := mwServe(t, idemhttp.Config{Store: mwMust(idemredis.New(client, idemredis.Config{}))(t), Registerer: reg}, h)
	r := mwDo(t, "POST", srv.URL+"/op", idemkey.NewV7(), nil)
	mwProblem(t, r, http.StatusServiceUnavailable, "was not run")
	if r.header.Get("Retry-After") != "1" {
		t.Errorf("Retry-After %q, want 1", r.header.Get("Retry-After"))
	}
	if n := h.runs.Load(); n != 0 {
		t.Errorf("the handler ran %d times without its key claimed", n)
	}
	mwMetric(t, reg, "error", 1)
}

func TestMiddlewareConfigErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		cfg  idemhttp.Config
		want string
	}{
		{"no store", idemhttp.Config{}, "Config.Store"},
		{"GET", idemhttp.Config{Store: mwMemStore(t), Methods: []string{"POST", "GET"}}, "Config.Methods"},
		{"negative limit", idemhttp.Config{Store: mwMemStore(t), MaxBodyBytes: -1}, "Config.MaxBodyBytes"},
		{"timed keys without the age check", idemhttp.Config{Store: mwMemStore(t), MaxKeyAge: -1, RequireTimedKeys: true}, "Config.RequireTimedKeys"},
	} {
		if _, err := idemhttp.Middleware(tc.cfg); !errors.Is(err, idem.ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an input error naming %s", tc.name, err, tc.want)
		}
	}
}
