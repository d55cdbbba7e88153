package idemhttp_test

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemhttp"
	"github.com/idemhq/idem/idemkey"
	"github.com/idemhq/idem/idemmem"
)

// trAttempt is one attempt as a test server saw it.
type trAttempt struct {
	key  string
	body string
	at   time.Time
}

// trServer is a test server that records every attempt and answers it with respond,
// which gets the attempt's number among those with the same key (1 for the first).
type trServer struct {
	*httptest.Server
	mu       sync.Mutex
	attempts []trAttempt
	perKey   map[string]int
}

func newTrServer(t testing.TB, respond func(w http.ResponseWriter, r *http.Request, n int, body []byte)) *trServer {
	s := &trServer{perKey: map[string]int{}}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		key := r.Header.Get(idemhttp.HeaderKey)
		s.mu.Lock()
		s.perKey[key]++
		n := s.perKey[key]
		s.attempts = append(s.attempts, trAttempt{key: key, body: string(body), at: time.Now()})
		s.mu.Unlock()
		respond(w, r, n, body)
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *trServer) seen() []trAttempt {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]trAttempt(nil), s.attempts...)
}

// trStatus answers the first len(codes) attempts of each key with those statuses
// and Retry-After retryAfter (if set), and the later ones 200 "ok".
func trStatus(retryAfter string, codes ...int) func(http.ResponseWriter, *http.Request, int, []byte) {
	return func(w http.ResponseWriter, _ *http.Request, n int, _ []byte) {
		if n <= len(codes) {
			if retryAfter != "" {
				w.Header().Set("Retry-After", retryAfter)
			}
			w.WriteHeader(codes[n-1])
			return
		}
		_, _ = io.WriteString(w, "ok")
	}
}

// trDrop closes the connection without an answer, as a crash or a cut network would.
func trDrop(t testing.TB, w http.ResponseWriter) {
	conn, _, err := w.(http.Hijacker).Hijack()
	if err != nil {
		t.Errorf("hijack: %v", err)
		return
	}
	_ = conn.Close()
}

// trClient returns a client using tr with short backoffs and its own connection pool.
func trClient(t testing.TB, tr *idemhttp.Transport) *http.Client {
	if tr.Base == nil {
		base := http.DefaultTransport.(*http.Transport).Clone()
		base.MaxIdleConnsPerHost = 16
		t.Cleanup(base.CloseIdleConnections)
		tr.Base = base
	}
	if tr.MinBackoff == 0 {
		tr.MinBackoff = time.Millisecond
	}
	if tr.MaxBackoff == 0 {
		tr.MaxBackoff = 5 * time.Millisecond
	}
	return &http.Client{Transport: tr}
}

// trDo sends method to url with body and returns the response and its body.
func trDo(t testing.TB, c *http.Client, req *http.Request) (*http.Response, string, error) {
	t.Helper()
	resp, err := c.Do(req)
	if err != nil {
		return nil, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp, string(b), err
}

func trRequest(t testing.TB, ctx context.Context, method, url string, body io.Reader) *http.Request {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, method, url, body)
	if err != nil {
		t.Fatal(err)
	}
	return req
}

// trBody is a body without GetBody that records whether it was closed.
type trBody struct {
	io.Reader
	closed atomic.Bool
}

func (b *trBody) Close() error { b.closed.Store(true); return nil }

// The server performs each request, stores its response under the key in an idem
// store, then drops the connection for the first few attempts of each key: the
// client must get every response while each effect happens exactly once.
func TestTransportDroppedResponsesRunOnce(t *testing.T) {
	t.Parallel()
	for _, pooled := range []bool{false, true} {
		t.Run(fmt.Sprintf("pooled=%v", pooled), func(t *testing.T) {
			t.Parallel()
			store, err := idemmem.New(idemmem.Config{})
			if err != nil {
				t.Fatal(err)
			}
			var mu sync.Mutex
			effects := map[string]int{}     // key -> times the effect ran
			keysOf := map[string][]string{} // body -> distinct keys it arrived with
			srv := newTrServer(t, func(w http.ResponseWriter, r *http.Request, n int, body []byte) {
				key := r.Header.Get(idemhttp.HeaderKey)
				mu.Lock()
				if ks := keysOf[string(body)]; len(ks) == 0 || ks[len(ks)-1] != key {
					keysOf[string(body)] = append(ks, key)
				}
				mu.Unlock()
				k, fp := idem.Key{Scope: "test", ID: key}, sha256.Sum256(body)
				res, err := store.Claim(r.Context(), idem.Claim{Key: k, Fingerprint: fp[:]})
				if err != nil {
					http.Error(w, err.Error(), http.StatusInternalServerError)
					return
				}
				var out []byte
				switch res.Outcome {
				case idem.Acquired:
					mu.Lock()
					effects[key]++
					mu.Unlock()
					out = append([]byte("done "), body...)
					if err := store.Complete(r.Context(), k, res.Token, out); err != nil {
						http.Error(w, err.Error(), http.StatusInternalServerError)
						return
					}
				case idem.Replayed:
					out = res.Record.Result
				case idem.InProgress:
					w.Header().Set("Retry-After", "1")
					w.WriteHeader(http.StatusConflict)
					return
				default:
					w.WriteHeader(http.StatusUnprocessableEntity)
					return
				}
				if drops := int(body[len(body)-1]-'0') % 3; n <= drops {
					trDrop(t, w)
					return
				}
				_, _ = w.Write(out)
			})
			base := http.DefaultTransport.(*http.Transport).Clone()
			base.DisableKeepAlives = !pooled
			t.Cleanup(base.CloseIdleConnections)
			client := trClient(t, &idemhttp.Transport{Base: base})

			const requests, workers = 50, 8
			work := make(chan int)
			var wg sync.WaitGroup
			for range workers {
				wg.Go(func() {
					for i := range work {
						body := fmt.Sprintf("order-%d", i)
						resp, got, err := trDo(t, client, trRequest(t, t.Context(), http.MethodPost, srv.URL+"/orders", strings.NewReader(body)))
						if err != nil {
							t.Errorf("%s: %v", body, err)
							continue
						}
						drops := i % 10 % 3
						if resp.StatusCode != http.StatusOK || got != "done "+body {
							t.Errorf("%s: got %d %q, want 200 %q", body, resp.StatusCode, got, "done "+body)
						}
						// A pooled connection lets net/http retry a dropped attempt by
						// itself (the request carries a key), unseen by Transport.
						if n := idemhttp.Attempts(resp); n != drops+1 && (!pooled || n < 1 || n > drops+1) {
							t.Errorf("%s: Attempts = %d, want %d", body, n, drops+1)
						}
					}
				})
			}
			for i := range requests {
				work <- i
			}
			close(work)
			wg.Wait()

			perKey := map[string]int{}
			for _, a := range srv.seen() {
				perKey[a.key]++
			}
			for i := range requests {
				body := fmt.Sprintf("order-%d", i)
				keys := keysOf[body]
				if len(keys) != 1 {
					t.Errorf("%s arrived with %d keys %q, want one key on every attempt", body, len(keys), keys)
					continue
				}
				drops := i % 10 % 3
				if effects[keys[0]] != 1 {
					t.Errorf("%s: effect ran %d times, want exactly once", body, effects[keys[0]])
				}
				if n := perKey[keys[0]]; n != drops+1 && (!pooled || n < drops+1) {
					t.Errorf("%s: server saw %d attempts, want %d", body, n, drops+1)
				}
			}
		})
	}
}

func TestTransportRetryAfter(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, retryAfter string
		status           int
	}{
		{"409 seconds", "1", http.StatusConflict},
		{"429 seconds", "1", http.StatusTooManyRequests},
		{"503 seconds", "1", http.StatusServiceUnavailable},
		{"503 date", "date", http.StatusServiceUnavailable},
		{"502 no header", "", http.StatusBadGateway},
		{"504 no header", "", http.StatusGatewayTimeout},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := newTrServer(t, func(w http.ResponseWriter, r *http.Request, n int, b []byte) {
				ra := tt.retryAfter
				if ra == "date" { // 2 s ahead, truncated to the second: at least 1 s
					ra = time.Now().Add(2 * time.Second).UTC().Format(http.TimeFormat)
				}
				trStatus(ra, tt.status)(w, r, n, b)
			})
			client := trClient(t, &idemhttp.Transport{MinBackoff: time.Millisecond, MaxBackoff: 10 * time.Second})
			resp, body, err := trDo(t, client, trRequest(t, t.Context(), http.MethodPost, srv.URL, strings.NewReader("x")))
			if err != nil || resp.StatusCode != http.StatusOK || body != "ok" || idemhttp.Attempts(resp) != 2 {
				t.Fatalf("got %v %q attempts=%d, %v; want 200 after 2 attempts", resp, body, idemhttp.Attempts(resp), err)
			}
			seen := srv.seen()
			if len(seen) != 2 || seen[0].key == "" || seen[0].key != seen[1].key {
				t.Fatalf("attempts %+v, want 2 with one key", seen)
			}
			if gap := seen[1].at.Sub(seen[0].at); tt.retryAfter != "" && gap < time.Second {
				t.Errorf("retried %v after the first attempt, want at least Retry-After (1s)", gap)
			}
		})
	}
	t.Run("capped by MaxBackoff", func(t *testing.T) {
		t.Parallel()
		srv := newTrServer(t, trStatus("3600", http.StatusServiceUnavailable))
		client := trClient(t, &idemhttp.Transport{MinBackoff: time.Millisecond, MaxBackoff: 10 * time.Millisecond})
		resp, _, err := trDo(t, client, trRequest(t, t.Context(), http.MethodPost, srv.URL, nil))
		if err != nil || resp.StatusCode != http.StatusOK || idemhttp.Attempts(resp) != 2 {
			t.Fatalf("got %v, %v; want 200 after 2 attempts", resp, err)
		}
	})
}

func TestTransportDoesNotRetry(t *testing.T) {
	t.Parallel()
	tests := []struct {
		method       string
		status       int
		wantAttempts int // what Attempts reports: 0 for methods passed through
	}{
		{http.MethodPost, http.StatusUnprocessableEntity, 1},
		{http.MethodPatch, http.StatusUnprocessableEntity, 1},
		{http.MethodPost, http.StatusBadRequest, 1},
		{http.MethodPost, http.StatusInternalServerError, 1},
		{http.MethodPost, http.StatusCreated, 1},
		{http.MethodGet, http.StatusServiceUnavailable, 0},
		{http.MethodPut, http.StatusServiceUnavailable, 0},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.method, " ", tt.status), func(t *testing.T) {
			t.Parallel()
			srv := newTrServer(t, trStatus("1", tt.status, tt.status))
			resp, _, err := trDo(t, trClient(t, &idemhttp.Transport{}), trRequest(t, t.Context(), tt.method, srv.URL, nil))
			if err != nil || resp.StatusCode != tt.status || idemhttp.Attempts(resp) != tt.wantAttempts {
				t.Fatalf("got %v, %v; want %d with Attempts %d", resp, err, tt.status, tt.wantAttempts)
			}
			seen := srv.seen()
			if len(seen) != 1 || (seen[0].key == "") != (tt.wantAttempts == 0) {
				t.Errorf("server saw %+v, want one attempt, with a key only for POST/PATCH", seen)
			}
		})
	}
}

func TestTransportKeys(t *testing.T) {
	t.Parallel()
	// The first attempt of each key fails, so every new key is sent twice.
	srv := newTrServer(t, trStatus("", http.StatusServiceUnavailable))
	client := trClient(t, &idemhttp.Transport{})
	send := func(ctx context.Context, path, key string) string {
		t.Helper()
		req := trRequest(t, ctx, http.MethodPost, srv.URL+path, strings.NewReader("x"))
		if key != "" {
			req.Header.Set(idemhttp.HeaderKey, key)
		}
		before := len(srv.seen())
		if _, _, err := trDo(t, client, req); err != nil {
			t.Fatal(err)
		}
		if key == "" && req.Header.Get(idemhttp.HeaderKey) != "" {
			t.Error("RoundTrip set the key on the caller's request")
		}
		seen := srv.seen()[before:]
		for _, a := range seen {
			if a.key != seen[0].key {
				t.Fatalf("attempts %+v, want one key on all", seen)
			}
		}
		return seen[0].key
	}
	if got := send(t.Context(), "/", "caller-key-1"); got != "caller-key-1" {
		t.Errorf("sent key %q, want the caller's", got)
	}
	if a, b := send(t.Context(), "/", ""), send(t.Context(), "/", ""); a == b {
		t.Errorf("two logical requests shared key %q", a)
	}
	ctx := idemhttp.WithKey(t.Context(), "order-17")
	if k, ok := idemhttp.KeyFrom(ctx); !ok || k != "order-17" {
		t.Errorf("KeyFrom = %q, %v", k, ok)
	}
	want := idemkey.Derive("order-17", "POST "+srv.Listener.Addr().String()+"/charges")
	if a, b := send(ctx, "/charges", ""), send(ctx, "/charges", ""); a != want || b != want {
		t.Errorf("keys under a lineage %q, %q; want %q both times", a, b, want)
	}
	if got := send(ctx, "/refunds", ""); got == want {
		t.Error("another path under the lineage got the same key")
	}
	if got := send(ctx, "/charges", "caller-key-2"); got != "caller-key-2" {
		t.Errorf("with a lineage, sent %q; want the caller's header", got)
	}
}

func TestTransportBodies(t *testing.T) {
	t.Parallel()
	payload := strings.Repeat("0123456789abcdef", 4) // 64 bytes
	t.Run("replayed within the limit", func(t *testing.T) {
		t.Parallel()
		srv := newTrServer(t, trStatus("", http.StatusServiceUnavailable, http.StatusBadGateway))
		body := &trBody{Reader: io.MultiReader(strings.NewReader(payload))} // no GetBody
		resp, _, err := trDo(t, trClient(t, &idemhttp.Transport{}), trRequest(t, t.Context(), http.MethodPost, srv.URL, body))
		if err != nil || resp.StatusCode != http.StatusOK || !body.closed.Load() {
			t.Fatalf("got %v, %v, body closed %v; want 200 and the body closed", resp, err, body.closed.Load())
		}
		for i, a := range srv.seen() {
			if a.body != payload {
				t.Errorf("attempt %d sent %q, want %q", i+1, a.body, payload)
			}
		}
	})
	t.Run("sent once beyond the limit", func(t *testing.T) {
		t.Parallel()
		srv := newTrServer(t, trStatus("", http.StatusServiceUnavailable))
		body := &trBody{Reader: io.MultiReader(strings.NewReader(payload))}
		client := trClient(t, &idemhttp.Transport{MaxBodyBytes: 16})
		resp, _, err := trDo(t, client, trRequest(t, t.Context(), http.MethodPost, srv.URL, body))
		if err != nil || resp.StatusCode != http.StatusServiceUnavailable || idemhttp.Attempts(resp) != 1 {
			t.Fatalf("got %v, %v; want the 503 of a single attempt", resp, err)
		}
		if seen := srv.seen(); len(seen) != 1 || seen[0].body != payload || seen[0].key == "" {
			t.Errorf("server saw %+v, want one attempt with the whole body and a key", seen)
		}
	})
}

func TestTransportContext(t *testing.T) {
	t.Parallel()
	t.Run("cancelled during the wait", func(t *testing.T) {
		t.Parallel()
		srv := newTrServer(t, trStatus("3600", http.StatusServiceUnavailable))
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		base := http.DefaultTransport.(*http.Transport).Clone()
		t.Cleanup(base.CloseIdleConnections)
		cancelLater := trRoundTripper(func(r *http.Request) (*http.Response, error) {
			time.AfterFunc(20*time.Millisecond, cancel)
			return base.RoundTrip(r)
		})
		// Without a prompt return this waits an hour, and the test times out.
		client := trClient(t, &idemhttp.Transport{Base: cancelLater, MaxBackoff: 2 * time.Hour})
		if _, _, err := trDo(t, client, trRequest(t, ctx, http.MethodPost, srv.URL, nil)); !errors.Is(err, context.Canceled) {
			t.Fatalf("got %v, want context.Canceled", err)
		}
	})
	t.Run("deadline before the retry", func(t *testing.T) {
		t.Parallel()
		srv := newTrServer(t, trStatus("3600", http.StatusServiceUnavailable))
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		client := trClient(t, &idemhttp.Transport{MaxBackoff: 2 * time.Hour})
		resp, _, err := trDo(t, client, trRequest(t, ctx, http.MethodPost, srv.URL, nil))
		if err != nil || resp.StatusCode != http.StatusServiceUnavailable || idemhttp.Attempts(resp) != 1 {
			t.Fatalf("got %v, %v; want the 503 at once, as no retry can start before the deadline", resp, err)
		}
	})
}

type trRoundTripper func(*http.Request) (*http.Response, error)

func (f trRoundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func TestTransportGivesUp(t *testing.T) {
	t.Parallel()
	t.Run("status", func(t *testing.T) {
		t.Parallel()
		srv := newTrServer(t, trStatus("", 503, 503, 503, 503))
		resp, _, err := trDo(t, trClient(t, &idemhttp.Transport{MaxAttempts: 3}), trRequest(t, t.Context(), http.MethodPost, srv.URL, nil))
		if err != nil || resp.StatusCode != 503 || idemhttp.Attempts(resp) != 3 || len(srv.seen()) != 3 {
			t.Fatalf("got %v, %v, server saw %d; want the last 503 after 3 attempts", resp, err, len(srv.seen()))
		}
	})
	t.Run("network", func(t *testing.T) {
		t.Parallel()
		srv := newTrServer(t, func(w http.ResponseWriter, _ *http.Request, _ int, _ []byte) { trDrop(t, w) })
		_, _, err := trDo(t, trClient(t, &idemhttp.Transport{MaxAttempts: 3}), trRequest(t, t.Context(), http.MethodPost, srv.URL, nil))
		var be *idem.BackendError
		if !errors.As(err, &be) || !strings.Contains(err.Error(), "after 3 attempt") || !idem.IsRetryable(err) {
			t.Fatalf("got %v, want a retryable *idem.BackendError after 3 attempts", err)
		}
		if seen := srv.seen(); len(seen) != 3 || seen[0].key != seen[2].key || !strings.Contains(err.Error(), seen[0].key) {
			t.Errorf("server saw %+v, want 3 attempts with the key named in the error", seen)
		}
	})
	t.Run("MaxElapsed", func(t *testing.T) {
		t.Parallel()
		srv := newTrServer(t, trStatus("", 503))
		resp, _, err := trDo(t, trClient(t, &idemhttp.Transport{MaxElapsed: time.Nanosecond}), trRequest(t, t.Context(), http.MethodPost, srv.URL, nil))
		if err != nil || resp.StatusCode != 503 || idemhttp.Attempts(resp) != 1 {
			t.Fatalf("got %v, %v; want the 503 without a retry", resp, err)
		}
	})
}

func TestTransportInputErrors(t *testing.T) {
	t.Parallel()
	srv := newTrServer(t, trStatus(""))
	tests := []struct {
		name string
		tr   idemhttp.Transport
		key  string
	}{
		{"MaxAttempts", idemhttp.Transport{MaxAttempts: -1}, ""},
		{"MinBackoff", idemhttp.Transport{MinBackoff: -1}, ""},
		{"MaxBackoff", idemhttp.Transport{MinBackoff: time.Second, MaxBackoff: time.Millisecond}, ""},
		{"MaxElapsed", idemhttp.Transport{MaxElapsed: -1}, ""},
		{"MaxBodyBytes", idemhttp.Transport{MaxBodyBytes: -1}, ""},
		{"NewKey", idemhttp.Transport{NewKey: func(*http.Request) string { return "" }}, ""},
		{"Idempotency-Key", idemhttp.Transport{}, "bad\x01key"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			body := &trBody{Reader: strings.NewReader("x")}
			req := trRequest(t, t.Context(), http.MethodPost, srv.URL, body)
			if tt.key != "" {
				req.Header[idemhttp.HeaderKey] = []string{tt.key}
			}
			_, err := tt.tr.RoundTrip(req)
			if !errors.Is(err, idem.ErrInvalid) || !strings.Contains(err.Error(), tt.name) || !body.closed.Load() {
				t.Errorf("got %v, body closed %v; want an *idem.InputError naming %s and the body closed", err, body.closed.Load(), tt.name)
			}
		})
	}
	if n := len(srv.seen()); n != 0 {
		t.Errorf("server saw %d requests, want none", n)
	}
}
