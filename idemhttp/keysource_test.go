package idemhttp_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemhttp"
	"github.com/idemhq/idem/idemmem"
	"github.com/idemhq/idem/idemsql"
)

// keyEcho is a handler that counts its runs per key and answers with the body it
// was handed, so a test sees the middleware restored it.
type keyEcho struct {
	mu   sync.Mutex
	runs map[string]int
	all  atomic.Int64
}

func (h *keyEcho) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	h.all.Add(1)
	h.mu.Lock()
	h.runs[string(body)]++
	h.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(body)
}

func (h *keyEcho) ran(body string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.runs[body]
}

func postBody(t *testing.T, url, body string, header ...string) (int, string, http.Header) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header
}

// A Stripe-style event keyed by its body's "id": run once, retries replayed, the
// same id with another body refused, concurrent deliveries run once, and the
// handler reads the whole body; on every store.
func TestMiddlewareKeyFromJSONField(t *testing.T) {
	for _, st := range mwStores {
		t.Run(st.name, func(t *testing.T) {
			t.Parallel()
			h := &keyEcho{runs: map[string]int{}}
			srv := mwServe(t, idemhttp.Config{Store: st.open(t), KeyJSONField: "id", Wait: time.Minute}, h)
			ev1 := `{"id":"evt_1","type":"payment_intent.succeeded","data":{"amount":100}}`
			for i := range 3 {
				code, body, hdr := postBody(t, srv.URL, ev1)
				if code != http.StatusOK || body != ev1 {
					t.Fatalf("delivery %d: %d %q, want 200 and the body the handler read, %q", i, code, body, ev1)
				}
				if replayed := hdr.Get("Idempotent-Replayed") == "true"; replayed != (i > 0) {
					t.Errorf("delivery %d: Idempotent-Replayed %q", i, hdr.Get("Idempotent-Replayed"))
				}
			}
			if n := h.ran(ev1); n != 1 {
				t.Errorf("evt_1 ran %d times, want once", n)
			}
			// The same id with another body: the fingerprint catches the reuse.
			other := `{"id":"evt_1","type":"payment_intent.failed"}`
			if code, body, _ := postBody(t, srv.URL, other); code != http.StatusUnprocessableEntity {
				t.Errorf("evt_1 with another body: %d %s, want 422", code, body)
			}
			if n := h.ran(other); n != 0 {
				t.Errorf("the reused id ran %d times, want never", n)
			}
			// Concurrent deliveries of one event: one run, every answer its response.
			ev3 := `{"type":"invoice.paid","id":"evt_3"}`
			var wg sync.WaitGroup
			codes := make(chan int, 8)
			for range 8 {
				wg.Go(func() {
					code, _, _ := postBody(t, srv.URL, ev3)
					codes <- code
				})
			}
			wg.Wait()
			close(codes)
			for code := range codes {
				if code != http.StatusOK && code != http.StatusConflict {
					t.Errorf("concurrent delivery: %d, want 200 (or 409 while in progress)", code)
				}
			}
			if n := h.ran(ev3); n != 1 {
				t.Errorf("evt_3 delivered 8 times at once ran %d times, want once", n)
			}
			// Numbers are keys too.
			num := `{"id":42}`
			postBody(t, srv.URL, num)
			postBody(t, srv.URL, num)
			if n := h.ran(num); n != 1 {
				t.Errorf("numeric id ran %d times, want once", n)
			}
			// Without the field (RequireKey off): passed through, each time, whole.
			free := `{"note":"no id"}`
			for range 2 {
				if code, body, _ := postBody(t, srv.URL, free); code != http.StatusOK || body != free {
					t.Errorf("no id: %d %q, want 200 and the body", code, body)
				}
			}
			if n := h.ran(free); n != 2 {
				t.Errorf("a body without the field ran %d times, want 2 (no key, no idempotency)", n)
			}
		})
	}
}

// Bodies whose key is ambiguous or malformed are refused before anything runs.
func TestMiddlewareKeyFromJSONFieldRefusals(t *testing.T) {
	t.Parallel()
	h := &keyEcho{runs: map[string]int{}}
	srv := mwServe(t, idemhttp.Config{Store: mwMust(idemmem.New(idemmem.Config{}))(t), KeyJSONField: "id", RequireKey: true, MaxBodyBytes: 64}, h)
	for _, c := range []struct{ body, want string }{
		{`{"id":"a","id":"b"}`, "twice"},
		{`{"id":"a","ID":"b"}`, "twice"},
		{`{"Id":"a"}`, `names it`},
		{`{"id":{"x":1}}`, "string or a number"},
		{`{"id":true}`, "string or a number"},
		{`{"id":null}`, "string or a number"},
		{`["id","a"]`, "not a JSON object"},
		{`{"id":"a"} {"id":"b"}`, "more than one"},
		{`{"id":"a"`, "not valid JSON"},
		{`{"id":""}`, "empty"},
		{`{"id":"a\nb"}`, "printable"},
		{`{"type":"x"}`, `no top-level field`},
		{``, `no top-level field`},
	} {
		code, body, _ := postBody(t, srv.URL, c.body)
		if code != http.StatusBadRequest || !strings.Contains(body, c.want) {
			t.Errorf("%s: %d %s, want 400 saying %q", c.body, code, body, c.want)
		}
	}
	if code, _, _ := postBody(t, srv.URL, `{"id":"big","pad":"`+strings.Repeat("x", 64)+`"}`); code != http.StatusRequestEntityTooLarge {
		t.Errorf("body over MaxBodyBytes: %d, want 413", code)
	}
	if n := h.all.Load(); n != 0 {
		t.Errorf("the handler ran %d times, want never", n)
	}
}

// A Standard Webhooks receiver keyed by webhook-id: run once, retries replayed; an
// Idempotency-Key is not the key then.
func TestMiddlewareKeyFromHeader(t *testing.T) {
	for _, st := range mwStores {
		t.Run(st.name, func(t *testing.T) {
			t.Parallel()
			h := &keyEcho{runs: map[string]int{}}
			srv := mwServe(t, idemhttp.Config{Store: st.open(t), KeyHeader: "webhook-id"}, h)
			for i := range 3 {
				ts := fmt.Sprint(1700000000 + i) // each retry is signed anew
				if code, _, _ := postBody(t, srv.URL, "order 1", "webhook-id", "msg_1", "webhook-timestamp", ts); code != http.StatusOK {
					t.Fatalf("delivery %d: %d", i, code)
				}
			}
			if n := h.ran("order 1"); n != 1 {
				t.Errorf("msg_1 ran %d times, want once", n)
			}
			for range 2 {
				postBody(t, srv.URL, "keyed elsewhere", "Idempotency-Key", "k-1")
			}
			if n := h.ran("keyed elsewhere"); n != 2 {
				t.Errorf("a request with only Idempotency-Key ran %d times, want 2 (passed through)", n)
			}
		})
	}
	t.Run("required", func(t *testing.T) {
		t.Parallel()
		srv := mwServe(t, idemhttp.Config{Store: mwMust(idemmem.New(idemmem.Config{}))(t), KeyHeader: "Webhook-Id", RequireKey: true}, http.NotFoundHandler())
		if code, body, _ := postBody(t, srv.URL, "x", "Idempotency-Key", "k"); code != http.StatusBadRequest || !strings.Contains(body, "Webhook-Id is missing") {
			t.Errorf("no Webhook-Id: %d %s, want 400 naming Webhook-Id", code, body)
		}
		if code, body, _ := postBody(t, srv.URL, "x", "Webhook-Id", "ké"); code != http.StatusBadRequest || !strings.Contains(body, "Webhook-Id") {
			t.Errorf("non-ASCII Webhook-Id: %d %s, want 400 naming Webhook-Id", code, body)
		}
	})
}

// Configurations that would derive keys from what requests share are refused,
// naming the field and the fix.
func TestKeySourceConfigRefused(t *testing.T) {
	t.Parallel()
	store := mwMust(idemmem.New(idemmem.Config{}))(t)
	for _, c := range []struct {
		cfg   idemhttp.Config
		field string
	}{
		{idemhttp.Config{KeyHeader: "webhook-id", KeyJSONField: "id"}, "Config.KeyHeader"},
		{idemhttp.Config{KeyHeader: "webhook id"}, "Config.KeyHeader"},
		{idemhttp.Config{KeyHeader: "webhook-timestamp"}, "Config.KeyHeader"},
		{idemhttp.Config{KeyHeader: "Stripe-Signature"}, "Config.KeyHeader"},
		{idemhttp.Config{KeyHeader: "authorization"}, "Config.KeyHeader"},
		{idemhttp.Config{KeyJSONField: "type"}, "Config.KeyJSONField"},
		{idemhttp.Config{KeyJSONField: "Status"}, "Config.KeyJSONField"},
		{idemhttp.Config{KeyJSONField: "order_id"}, "Config.KeyJSONField"},
		{idemhttp.Config{KeyJSONField: "event-type"}, "Config.KeyJSONField"},
		{idemhttp.Config{KeyJSONField: " id"}, "Config.KeyJSONField"},
	} {
		c.cfg.Store = store
		_, err := idemhttp.Middleware(c.cfg)
		var ie *idem.InputError
		if !errors.As(err, &ie) || ie.Field != c.field || ie.Fix == "" {
			t.Errorf("%+v: %v, want an *idem.InputError on %s with a fix", c.cfg, err, c.field)
		}
	}
	for _, cfg := range []idemhttp.Config{
		{Store: store, KeyJSONField: "event", AllowCommonKeyField: true},
		{Store: store, KeyJSONField: "id"},
		{Store: store, KeyHeader: "Webhook-Id"},
	} {
		if _, err := idemhttp.Middleware(cfg); err != nil {
			t.Errorf("%+v: %v, want it accepted", cfg, err)
		}
	}
}

// The atomic middleware takes the key from the body too: a Stripe-style event's
// effect is written once, in the transaction that records its id, however often it
// is delivered.
func TestAtomicMiddlewareKeyFromJSONField(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := mwSQLite(t)
	db := mwMust(idemsql.SQLDB(ctx, s.DB()))(t)
	if err := db.InTx(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, "CREATE TABLE events_applied (id TEXT NOT NULL)")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	mw := mwMust(idemhttp.AtomicMiddleware(db, s, idemhttp.Config{KeyJSONField: "id", RequireKey: true}))(t)
	srv := mwServeHandler(t, mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tx, _ := idemhttp.TxFrom[*sql.Tx](r.Context())
		body, _ := io.ReadAll(r.Body)
		if _, err := tx.ExecContext(r.Context(), "INSERT INTO events_applied (id) VALUES (?)", string(body)); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})))
	ev := `{"id":"evt_9","type":"charge.refunded"}`
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() { postBody(t, srv.URL, ev) })
	}
	wg.Wait()
	postBody(t, srv.URL, ev)
	var n int
	if err := s.DB().QueryRowContext(ctx, "SELECT COUNT(*) FROM events_applied WHERE id = ?", ev).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Errorf("the event was applied %d times, want once (with the whole body the handler read)", n)
	}
}
