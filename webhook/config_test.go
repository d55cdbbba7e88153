package webhook_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemmem"
	"github.com/idemhq/idem/webhook"
)

// countingStore counts the calls that reach the store.
type countingStore struct {
	idem.Store
	calls atomic.Int64
}

func (s *countingStore) Claim(ctx context.Context, c idem.Claim) (idem.Result, error) {
	s.calls.Add(1)
	return s.Store.Claim(ctx, c)
}

func TestReceiverRefusesBeforeTheStore(t *testing.T) {
	t.Parallel()
	store := &countingStore{Store: must(idemmem.New(idemmem.Config{}))(t)}
	var runs atomic.Int64
	mw := must(webhook.Receiver(webhook.Config{Verifier: must(webhook.Standard(testSecret))(t), Store: store, MaxBodyBytes: 64}))(t)
	srv := httptest.NewServer(mw(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { runs.Add(1) })))
	t.Cleanup(srv.Close)
	ctx := context.Background()
	forger := sender{url: srv.URL, key: []byte("another key")}
	if r, _ := forger.deliver(ctx, t, "msg_1", "{}", time.Now()); r.status != http.StatusBadRequest {
		t.Errorf("forged: %d, want 400", r.status)
	}
	if r, _ := (sender{url: srv.URL, key: testKey}).deliver(ctx, t, "msg_1", strings.Repeat("x", 65), time.Now()); r.status != http.StatusRequestEntityTooLarge {
		t.Errorf("65-byte body over MaxBodyBytes 64: %d, want 413", r.status)
	}
	resp, err := http.Get(srv.URL)
	if err != nil || resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("GET: %v %v, want 405", resp.StatusCode, err)
	}
	resp.Body.Close()
	if store.calls.Load() != 0 || runs.Load() != 0 {
		t.Errorf("refused deliveries reached the store %d times, the handler %d times", store.calls.Load(), runs.Load())
	}
	if r, _ := (sender{url: srv.URL, key: testKey}).deliver(ctx, t, "msg_1", "{}", time.Now()); r.status != http.StatusOK || store.calls.Load() != 1 {
		t.Errorf("genuine: %d with %d claims, want 200 after 1", r.status, store.calls.Load())
	}
}

// The sender sets the key: an Idempotency-Key it sends along must not choose the
// record, or one event could be replayed another's answer.
func TestReceiverKeysByEventID(t *testing.T) {
	t.Parallel()
	store := must(idemmem.New(idemmem.Config{}))(t)
	v := must(webhook.Stripe("whsec_stripe_test"))(t)
	mw := must(webhook.Receiver(webhook.Config{Verifier: v, Store: store, Scope: "stripe"}))(t)
	srv := httptest.NewServer(mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, webhook.EventID(r.Context()))
	})))
	t.Cleanup(srv.Close)
	for _, id := range []string{"evt_1", "evt_2"} {
		body := `{"id":"` + id + `","object":"event"}`
		req, _ := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader(body))
		req.Header.Set("Stripe-Signature", stripeHeader("whsec_stripe_test", time.Now().Unix(), body))
		req.Header.Set("Idempotency-Key", "same-for-both")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if got := mustRead(t, resp); resp.StatusCode != http.StatusOK || got != id {
			t.Errorf("%s: %d %q", id, resp.StatusCode, got)
		}
	}
}

func mustRead(t *testing.T, resp *http.Response) string {
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestConfigRefused(t *testing.T) {
	t.Parallel()
	store := must(idemmem.New(idemmem.Config{}))(t)
	stripe := must(webhook.Stripe("whsec_x"))(t)
	for _, tc := range []struct {
		name  string
		cfg   webhook.Config
		field string
	}{
		{"no verifier", webhook.Config{Store: store}, "Verifier"},
		{"no store", webhook.Config{Verifier: stripe}, "Store"},
		{"retention under Stripe's 3 days", webhook.Config{Verifier: stripe, Store: store, Retention: 48 * time.Hour}, "Retention"},
		{"negative retention", webhook.Config{Verifier: stripe, Store: store, Retention: -1}, "Retention"},
		{"negative body limit", webhook.Config{Verifier: stripe, Store: store, MaxBodyBytes: -1}, "MaxBodyBytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := webhook.Receiver(tc.cfg)
			var ie *idem.InputError
			if !errors.As(err, &ie) || !strings.Contains(ie.Field, tc.field) {
				t.Fatalf("err = %v, want an InputError on %s", err, tc.field)
			}
		})
	}
	if _, err := webhook.Receiver(webhook.Config{Verifier: stripe, Store: store, Retention: 48 * time.Hour, ShortRetention: true}); err != nil {
		t.Errorf("ShortRetention: %v", err)
	}
}
