package effect_test

import (
	"context"
	"database/sql"
	"encoding/json"
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

	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/chaos"
	"github.com/idemhq/idem/effect"
	"github.com/idemhq/idem/idemhttp"
	"github.com/idemhq/idem/idemkey"
	"github.com/idemhq/idem/idemmem"
	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/internal/sqltest"
)

// payments is a fake payment service over real HTTP. With keys, it honours
// Idempotency-Key (idem's own middleware in front of it); it counts the charges
// it actually made, per order, and answers "did this key happen?" for reconcile.
type payments struct {
	srv     *httptest.Server
	mu      sync.Mutex
	charges map[string]int    // order → charges made
	byKey   map[string]string // Idempotency-Key → charge id
	n       atomic.Int64
}

func newPayments(t *testing.T, honourKeys bool) *payments {
	p := &payments{charges: map[string]int{}, byKey: map[string]string{}}
	charge := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		order := r.URL.Query().Get("order")
		id := fmt.Sprintf("ch_%d", p.n.Add(1))
		p.mu.Lock()
		p.charges[order]++
		p.byKey[r.Header.Get(idemhttp.HeaderKey)] = id
		p.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_ = json.NewEncoder(w).Encode(map[string]string{"id": id})
	})
	h := http.Handler(charge)
	if honourKeys {
		store, err := idemmem.New(idemmem.Config{})
		if err != nil {
			t.Fatal(err)
		}
		mw, err := idemhttp.Middleware(idemhttp.Config{Store: store, RequireKey: true})
		if err != nil {
			t.Fatal(err)
		}
		h = mw(charge)
	}
	mux := http.NewServeMux()
	mux.Handle("POST /charges", h)
	p.srv = httptest.NewServer(mux)
	t.Cleanup(p.srv.Close)
	return p
}

func (p *payments) count(order string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.charges[order]
}

// wantCharged fails t unless order was charged n times.
func (p *payments) wantCharged(t *testing.T, order string, n int) {
	t.Helper()
	if c := p.count(order); c != n {
		t.Errorf("%s charged %d times, want %d", order, c, n)
	}
}

// happened answers a reconcile: the charge id made under the outbound key that a
// call under the derived key sends.
func (p *payments) happened(derived string) (string, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	id, ok := p.byKey[idemkey.Derive(derived, "POST "+strings.TrimPrefix(p.srv.URL, "http://")+"/charges")]
	return id, ok
}

// charge is the call under test: a POST through idemhttp.Transport, which derives
// the outbound Idempotency-Key from the key in the context.
func (p *payments) charge(order string) effect.Call {
	client := &http.Client{Transport: &idemhttp.Transport{MaxAttempts: 1}}
	return func(ctx context.Context, key string) ([]byte, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.srv.URL+"/charges?order="+order, strings.NewReader("{}"))
		if err != nil {
			return nil, err
		}
		resp, err := client.Do(req)
		if err != nil {
			return nil, err
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusCreated {
			return nil, fmt.Errorf("charge: %d %s", resp.StatusCode, body)
		}
		return body, err
	}
}

type env struct {
	name  string
	db    idemsql.TxDB[*sql.Tx]
	clock *chaos.Clock
}

func (e env) fence(t *testing.T, cfg effect.Config) *effect.Fence[*sql.Tx] {
	t.Helper()
	cfg.Now = e.clock.Now
	f, err := effect.New(context.Background(), e.db, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// forEachDB runs fn on SQLite, Postgres and MySQL, each in a database of its own.
func forEachDB(t *testing.T, fn func(t *testing.T, e env)) {
	sqltest.ForEachDialect(t, func(t *testing.T, db idemsql.TxDB[*sql.Tx]) {
		fn(t, env{db.Dialect().String(), db, &chaos.Clock{}})
	})
}

// crash runs a call that dies (panics) where die says: before the call, or
// after it and before Do records COMPLETE.
func crash(t *testing.T, f *effect.Fence[*sql.Tx], key, step string, call effect.Call, afterCall bool) {
	t.Helper()
	defer func() {
		if r := recover(); r != "crash" {
			t.Fatalf("the worker did not crash: %v", r)
		}
	}()
	_, _ = f.Do(context.Background(), key, step, func(ctx context.Context, k string) ([]byte, error) {
		if afterCall {
			if _, err := call(ctx, k); err != nil {
				t.Errorf("call before the crash: %v", err)
			}
		}
		panic("crash")
	})
}

func TestRetryReturnsTheStoredResult(t *testing.T) {
	t.Parallel()
	forEachDB(t, func(t *testing.T, e env) {
		p := newPayments(t, true)
		f := e.fence(t, effect.Config{})
		first, err := f.Do(context.Background(), "order-1", "charge", p.charge("order-1"))
		if err != nil {
			t.Fatal(err)
		}
		again, err := f.Do(context.Background(), "order-1", "charge", func(context.Context, string) ([]byte, error) {
			t.Error("a complete effect was called again")
			return nil, nil
		})
		if err != nil || string(again) != string(first) {
			t.Fatalf("retry: %q, %v; want the stored %q", again, err, first)
		}
		p.wantCharged(t, "order-1", 1)
	})
}

// The three crashes of the issue, each ending in exactly one charge.
func TestCrashesChargeOnce(t *testing.T) {
	t.Parallel()
	forEachDB(t, func(t *testing.T, e env) {
		ctx := context.Background()
		p := newPayments(t, true)
		f := e.fence(t, effect.Config{Lease: time.Minute})

		// Crash before the call, and after the call before COMPLETE: the effect stays
		// PENDING; a retry inside the lease is refused; after it, the sweeper calls
		// again with the same derived key.
		crash(t, f, "order-a", "charge", p.charge("order-a"), false)
		crash(t, f, "order-b", "charge", p.charge("order-b"), true)
		if _, err := f.Do(ctx, "order-b", "charge", p.charge("order-b")); !errors.Is(err, effect.ErrInProgress) {
			t.Fatalf("Do within the crashed worker's lease: %v, want ErrInProgress", err)
		}
		e.clock.Jump(2 * time.Minute)
		n, err := f.Recover(ctx, "charge", 10, func(ctx context.Context, key string) ([]byte, error) {
			order := map[string]string{idemkey.Derive("order-a", "charge"): "order-a", idemkey.Derive("order-b", "charge"): "order-b"}[key]
			return p.charge(order)(ctx, key)
		})
		if err != nil || n != 2 {
			t.Fatalf("Recover = %d, %v; want both effects completed", n, err)
		}
		for _, order := range []string{"order-a", "order-b"} {
			p.wantCharged(t, order, 1)
			if fx, ok, err := f.Get(ctx, order, "charge"); err != nil || !ok || fx.State != effect.StateComplete || fx.Token != 2 {
				t.Errorf("%s: %+v, %v, %v; want complete under token 2", order, fx, ok, err)
			}
		}

		// Paused past the lease: the first worker charges and stalls; a second takes
		// over and completes; the first one's late COMPLETE is fenced.
		charged, resume := make(chan struct{}), make(chan struct{})
		late := make(chan error, 1)
		go func() {
			_, err := f.Do(ctx, "order-c", "charge", func(ctx context.Context, key string) ([]byte, error) {
				out, err := p.charge("order-c")(ctx, key)
				close(charged)
				<-resume
				return out, err
			})
			late <- err
		}()
		<-charged
		e.clock.Jump(2 * time.Minute)
		if _, err := f.Do(ctx, "order-c", "charge", p.charge("order-c")); err != nil {
			t.Fatalf("takeover of the paused worker's effect: %v", err)
		}
		close(resume)
		if err := <-late; !errors.Is(err, idem.ErrLeaseLost) {
			t.Fatalf("the paused worker's late COMPLETE: %v, want ErrLeaseLost", err)
		}
		p.wantCharged(t, "order-c", 1)
	})
}

// A downstream that ignores keys: without Reconcile a crash after the call charges
// twice (the documented at-least-once); with it, once.
func TestReconcileForDownstreamsWithoutKeys(t *testing.T) {
	t.Parallel()
	forEachDB(t, func(t *testing.T, e env) {
		ctx := context.Background()
		p := newPayments(t, false)
		reconcile := func(_ context.Context, step, key string) ([]byte, bool, error) {
			id, ok := p.happened(key)
			return []byte(`{"id":"` + id + `"}`), ok, nil
		}
		for _, tc := range []struct {
			order     string
			reconcile effect.Reconcile
			want      int
		}{{"plain", nil, 2}, {"reconciled", reconcile, 1}} {
			f := e.fence(t, effect.Config{Lease: time.Minute, Reconcile: tc.reconcile})
			crash(t, f, tc.order, "charge", p.charge(tc.order), true)
			e.clock.Jump(2 * time.Minute)
			if _, err := f.Do(ctx, tc.order, "charge", p.charge(tc.order)); err != nil {
				t.Fatal(err)
			}
			p.wantCharged(t, tc.order, tc.want)
		}
	})
}

func TestFailures(t *testing.T) {
	t.Parallel()
	forEachDB(t, func(t *testing.T, e env) {
		ctx := context.Background()
		f := e.fence(t, effect.Config{})
		declined := errors.New("card declined")
		_, err := f.Do(ctx, "o1", "charge", func(context.Context, string) ([]byte, error) { return nil, effect.Permanent(declined) })
		var fe *effect.FailedError
		if !errors.As(err, &fe) || !strings.Contains(fe.Reason, "card declined") {
			t.Fatalf("permanent failure: %v", err)
		}
		if _, err := f.Do(ctx, "o1", "charge", func(context.Context, string) ([]byte, error) {
			t.Error("a failed effect was called again")
			return nil, nil
		}); !errors.As(err, &fe) {
			t.Fatalf("retry of a failed effect: %v", err)
		}
		// A transient error releases the lease: the retry calls again, at once.
		calls := 0
		flaky := func(context.Context, string) ([]byte, error) {
			if calls++; calls == 1 {
				return nil, errors.New("timeout")
			}
			return []byte("ok"), nil
		}
		if _, err := f.Do(ctx, "o2", "charge", flaky); err == nil {
			t.Fatal("first attempt should fail")
		}
		if out, err := f.Do(ctx, "o2", "charge", flaky); err != nil || string(out) != "ok" {
			t.Fatalf("retry after a transient error: %q, %v", out, err)
		}
		// Bad input names the field.
		for _, tc := range []struct{ key, step, field string }{{"", "charge", "Key.ID"}, {"o3", "", "step"}} {
			_, err := f.Do(ctx, tc.key, tc.step, flaky)
			var ie *idem.InputError
			if !errors.As(err, &ie) || ie.Field != tc.field {
				t.Errorf("Do(%q, %q): %v, want an InputError on %s", tc.key, tc.step, err, tc.field)
			}
		}
	})
}

// Many workers race for one effect: one call.
func TestConcurrentWorkersCallOnce(t *testing.T) {
	t.Parallel()
	forEachDB(t, func(t *testing.T, e env) {
		f := e.fence(t, effect.Config{})
		var calls atomic.Int64
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				for {
					_, err := f.Do(context.Background(), "shared", "mail", func(context.Context, string) ([]byte, error) {
						calls.Add(1)
						time.Sleep(5 * time.Millisecond)
						return []byte("sent"), nil
					})
					if !errors.Is(err, effect.ErrInProgress) {
						if err != nil {
							t.Error(err)
						}
						return
					}
					time.Sleep(time.Millisecond)
				}
			})
		}
		wg.Wait()
		if n := calls.Load(); n != 1 {
			t.Fatalf("%d calls, want 1", n)
		}
	})
}

// The call's context carries the derived key; idemhttp.Transport derives the
// outbound Idempotency-Key from it, so a retry sends the same key.
func TestKeyLineage(t *testing.T) {
	t.Parallel()
	forEachDB(t, func(t *testing.T, e env) {
		f := e.fence(t, effect.Config{})
		_, err := f.Do(context.Background(), "order-9", "charge", func(ctx context.Context, key string) ([]byte, error) {
			if key != idemkey.Derive("order-9", "charge") {
				t.Errorf("key %q is not Derive(order-9, charge)", key)
			}
			if k, ok := idemhttp.KeyFrom(ctx); !ok || k != key {
				t.Errorf("context key %q, %v; want %q", k, ok, key)
			}
			return nil, nil
		})
		if err != nil {
			t.Fatal(err)
		}
	})
}

// One key lineage from the inbound request to the downstream call: an order API
// behind idemhttp's middleware charges through the fence from the handler, whose
// context carries the request's lineage. The handler crashes after the charge;
// the client's retry (same Idempotency-Key) runs it again, and the payment
// service sees the same derived key both times: one charge.
func TestLineageFromRequestToDownstream(t *testing.T) {
	t.Parallel()
	forEachDB(t, func(t *testing.T, e env) {
		p := newPayments(t, true)
		f := e.fence(t, effect.Config{Lease: time.Minute})
		store, err := idemmem.New(idemmem.Config{})
		if err != nil {
			t.Fatal(err)
		}
		mw, err := idemhttp.Middleware(idemhttp.Config{Store: store, RequireKey: true})
		if err != nil {
			t.Fatal(err)
		}
		var crashOnce atomic.Bool
		crashOnce.Store(true)
		api := httptest.NewServer(mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			lineage, ok := idem.KeyFrom(r.Context())
			if !ok {
				t.Error("the handler's context carries no key lineage")
			}
			_, err := f.Do(r.Context(), lineage, "charge", func(ctx context.Context, key string) ([]byte, error) {
				out, err := p.charge("o-7")(ctx, key)
				if crashOnce.CompareAndSwap(true, false) {
					panic(http.ErrAbortHandler) // the handler dies after the charge
				}
				return out, err
			})
			if err != nil {
				http.Error(w, err.Error(), http.StatusServiceUnavailable)
				return
			}
			w.WriteHeader(http.StatusCreated)
		})))
		defer api.Close()
		send := func() (int, error) {
			req, _ := http.NewRequest(http.MethodPost, api.URL+"/orders", strings.NewReader(`{"order":"o-7"}`))
			req.Header.Set(idemhttp.HeaderKey, "req-1")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return 0, err
			}
			resp.Body.Close()
			return resp.StatusCode, nil
		}
		if _, err := send(); err == nil {
			t.Fatal("the crashed handler answered")
		}
		e.clock.Jump(2 * time.Minute) // the crashed call's lease passes
		if code, err := send(); err != nil || code != http.StatusCreated {
			t.Fatalf("retry: %d, %v", code, err)
		}
		p.wantCharged(t, "o-7", 1)
		p.mu.Lock()
		defer p.mu.Unlock()
		if len(p.byKey) != 1 {
			t.Fatalf("the payment service saw keys %v, want one", p.byKey)
		}
		for k := range p.byKey {
			if k == "" || k == "req-1" {
				t.Fatalf("downstream key %q is not derived", k)
			}
		}
	})
}

// A call that fails because the caller's context ended still gives its lease
// back: the next Do calls again at once instead of waiting for the lease.
func TestCancelledCallReleasesItsLease(t *testing.T) {
	t.Parallel()
	forEachDB(t, func(t *testing.T, e env) {
		f := e.fence(t, effect.Config{Lease: time.Hour})
		ctx, cancel := context.WithCancel(context.Background())
		_, err := f.Do(ctx, "o-1", "mail", func(ctx context.Context, _ string) ([]byte, error) {
			cancel() // the request that asked for the effect went away mid-call
			return nil, ctx.Err()
		})
		if err == nil {
			t.Fatal("the cancelled call succeeded")
		}
		out, err := f.Do(context.Background(), "o-1", "mail", func(context.Context, string) ([]byte, error) { return []byte("sent"), nil })
		if err != nil || string(out) != "sent" {
			t.Fatalf("retry after a cancelled call: %q, %v; want it called at once", out, err)
		}
	})
}
