package idemhttp_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemhttp"
)

// whsecKey is a Standard Webhooks secret and the HMAC key it decodes to.
var (
	whsecKey = []byte("0123456789abcdef0123456789abcdef")
	whsec    = []byte("whsec_" + base64.StdEncoding.EncodeToString(whsecKey))
)

// signStd is the Standard Webhooks v1 signature, as the specification writes it.
func signStd(key []byte, id, ts string, body []byte) string {
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(id + "." + ts + "." + string(body)))
	return "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil))
}

func publishOne(t *testing.T, secret []byte, m idem.Message) received {
	t.Helper()
	rc := newReceiver(t, nil)
	s, err := idemhttp.NewWebhookSink(idemhttp.WebhookConfig{URL: rc.srv.URL + "/hooks", Secret: secret})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Publish(context.Background(), m); err != nil {
		t.Fatalf("Publish: %v", err)
	}
	return rc.requests()[0]
}

// The sink sends the Standard Webhooks headers beside idem's own, both signed with
// the key of a whsec_ secret; VerifyWebhook accepts the request.
func TestWebhookStandardHeaders(t *testing.T) {
	t.Parallel()
	m := idem.Message{ID: "order-1.created", Topic: "orders.created", Payload: []byte(`{"total":42}`),
		Headers: map[string]string{"Content-Type": "application/json"}}
	g := publishOne(t, whsec, m)
	h := g.req.Header
	ts := h.Get("webhook-timestamp")
	if h.Get("webhook-id") != m.ID || h.Get("Idempotency-Key") != m.ID || ts != h.Get("Idem-Timestamp") {
		t.Errorf("webhook-id %q, Idempotency-Key %q, webhook-timestamp %q, Idem-Timestamp %q; want the ID twice and one timestamp",
			h.Get("webhook-id"), h.Get("Idempotency-Key"), ts, h.Get("Idem-Timestamp"))
	}
	if unix, err := strconv.ParseInt(ts, 10, 64); err != nil || time.Since(time.Unix(unix, 0)).Abs() > time.Minute {
		t.Errorf("webhook-timestamp %q is not the current Unix time", ts)
	}
	if want := signStd(whsecKey, m.ID, ts, m.Payload); h.Get("webhook-signature") != want {
		t.Errorf("webhook-signature %q, want %q", h.Get("webhook-signature"), want)
	}
	// The v2 signature stays for one minor version, keyed with the same key.
	if want := signV2(whsecKey, ts, m.ID, m.Topic, "application/json", m.Payload); h.Get("Idem-Signature") != want {
		t.Errorf("Idem-Signature %q, want %q", h.Get("Idem-Signature"), want)
	}
	if err := idemhttp.VerifyWebhook(whsec, g.req, g.body, 0); err != nil {
		t.Errorf("VerifyWebhook: %v", err)
	}
	// A receiver that knows only the standard verifies by the standard headers.
	legacyless := g.req.Clone(context.Background())
	legacyless.Header.Del("Idem-Signature")
	legacyless.Header.Del("Idem-Timestamp")
	if err := idemhttp.VerifyWebhook(whsec, legacyless, g.body, 0); err != nil {
		t.Errorf("VerifyWebhook without Idem-Signature: %v", err)
	}
}

// A raw secret is the key itself: a Standard Webhooks library of the receiver takes
// its whsec_ form, StandardWebhookSecret.
func TestWebhookRawSecretStandardForm(t *testing.T) {
	t.Parallel()
	m := idem.Message{ID: "k-1", Topic: "t", Payload: []byte("x")}
	g := publishOne(t, secret, m)
	std := idemhttp.StandardWebhookSecret(secret)
	if !strings.HasPrefix(std, "whsec_") || idemhttp.StandardWebhookSecret([]byte(std)) != std {
		t.Fatalf("StandardWebhookSecret = %q, want a whsec_ secret that is its own form", std)
	}
	h := g.req.Header
	if want := signStd(secret, m.ID, h.Get("webhook-timestamp"), m.Payload); h.Get("webhook-signature") != want {
		t.Errorf("webhook-signature %q, want %q", h.Get("webhook-signature"), want)
	}
	for _, s := range [][]byte{secret, []byte(std)} {
		if err := idemhttp.VerifyWebhook(s, g.req, g.body, 0); err != nil {
			t.Errorf("VerifyWebhook(%q…): %v", s[:6], err)
		}
	}
}

func TestWebhookStandardRefusesForgeries(t *testing.T) {
	t.Parallel()
	m := idem.Message{ID: "pay-7", Topic: "payments", Payload: []byte(`{"amount":100}`)}
	g := publishOne(t, whsec, m)
	old := strconv.FormatInt(time.Now().Add(-time.Hour).Unix(), 10)
	other := []byte("whsec_" + base64.StdEncoding.EncodeToString([]byte("another key of twenty-four+ bytes")))
	for _, c := range []struct {
		name string
		key  []byte
		req  *http.Request
		body []byte
	}{
		{"tampered body", whsec, g.req, []byte(`{"amount":999}`)},
		{"other webhook-id", whsec, g.with("webhook-id", "pay-8"), g.body},
		// Idempotency-Key is not signed by the standard: it must equal webhook-id.
		{"other Idempotency-Key", whsec, g.with("Idempotency-Key", "pay-8"), g.body},
		{"wrong secret", other, g.req, g.body},
		{"no webhook-id", whsec, g.with("webhook-id", ""), g.body},
		{"no timestamp", whsec, g.with("webhook-timestamp", ""), g.body},
		{"old timestamp, correctly signed", whsec, func() *http.Request {
			r := g.with("webhook-timestamp", old)
			r.Header.Set("webhook-signature", signStd(whsecKey, m.ID, old, m.Payload))
			return r
		}(), g.body},
		{"second webhook-id", whsec, g.also("webhook-id", "pay-8"), g.body},
		{"second webhook-timestamp", whsec, g.also("webhook-timestamp", old), g.body},
		{"second Idempotency-Key", whsec, g.also("Idempotency-Key", "pay-8"), g.body},
		{"no v1 signature", whsec, g.with("webhook-signature", "v1a,"+strings.TrimPrefix(g.req.Header.Get("webhook-signature"), "v1,")), g.body},
		{"signature not base64", whsec, g.with("webhook-signature", "v1,!!"), g.body},
		// A present webhook-signature is verified, not skipped for the v2 one.
		{"empty webhook-signature", whsec, g.with("webhook-signature", " "), g.body},
	} {
		if err := idemhttp.VerifyWebhook(c.key, c.req, c.body, time.Minute); !errors.Is(err, idemhttp.ErrUnverified) {
			t.Errorf("%s: VerifyWebhook = %v, want ErrUnverified", c.name, err)
		}
	}
	// Rotation: the receiver holds the old and the new secret.
	if err := idemhttp.VerifyWebhookSecrets([][]byte{other, whsec}, g.req, g.body, 0); err != nil {
		t.Errorf("rotated secrets: %v", err)
	}
	rot := g.with("webhook-signature", signStd([]byte("another key of twenty-four+ bytes"), m.ID, g.req.Header.Get("webhook-timestamp"), m.Payload)+" "+g.req.Header.Get("webhook-signature"))
	if err := idemhttp.VerifyWebhook(whsec, rot, g.body, 0); err != nil {
		t.Errorf("two signatures, the second right: %v", err)
	}
}

// Malformed whsec_ secrets are refused naming the field, by the sink and the
// verifier alike.
func TestWebhookRefusesBadStandardSecrets(t *testing.T) {
	t.Parallel()
	for _, s := range []string{
		"whsec_not base64!",
		"whsec_" + base64.StdEncoding.EncodeToString(make([]byte, idemhttp.MinStandardSecret-1)),
		"whsec_",
	} {
		_, err := idemhttp.NewWebhookSink(idemhttp.WebhookConfig{URL: "https://example.com/x", Secret: []byte(s)})
		var ie *idem.InputError
		if !errors.As(err, &ie) || ie.Field != "WebhookConfig.Secret" || !strings.Contains(ie.Fix, "whsec_") {
			t.Errorf("sink with %q: %v, want an *idem.InputError on WebhookConfig.Secret", s, err)
		}
		r := httptest.NewRequest(http.MethodPost, "/", nil)
		if err := idemhttp.VerifyWebhook([]byte(s), r, nil, 0); !errors.As(err, &ie) {
			t.Errorf("verify with %q: %v, want an *idem.InputError", s, err)
		}
	}
	if _, err := idemhttp.NewWebhookSink(idemhttp.WebhookConfig{URL: "https://example.com/x", Secret: whsec}); err != nil {
		t.Errorf("whsec_ secret of 32 bytes: %v", err)
	}
}

// FuzzVerifyStandardWebhook: whatever the headers hold, VerifyWebhook accepts only
// a request carrying the right v1 signature, refuses everything else with
// ErrUnverified, and accepts the right signature beside any other entries.
func FuzzVerifyStandardWebhook(f *testing.F) {
	now := strconv.FormatInt(time.Now().Unix(), 10)
	f.Add(now, "msg_1", "", "v1,AAAA", []byte("{}"))
	f.Add("", "", "", "", []byte(nil))
	f.Add("+1", "k", "k", "v1,", []byte("x"))
	f.Add(now, "k", "other", "v1a,xx v1,==  v2,abc", []byte("x"))
	f.Add("99999999999999999999", "k\n", "", "v1,"+strings.Repeat("A", 44), []byte{0})
	f.Fuzz(func(t *testing.T, ts, id, key, sig string, body []byte) {
		req := func(sigs ...string) *http.Request {
			r := httptest.NewRequest(http.MethodPost, "/hook", nil)
			r.Header["Webhook-Id"] = []string{id}
			r.Header["Webhook-Timestamp"] = []string{ts}
			if key != "" {
				r.Header["Idempotency-Key"] = []string{key}
			}
			r.Header["Webhook-Signature"] = sigs
			return r
		}
		good := signStd(whsecKey, id, ts, body)
		err := idemhttp.VerifyWebhook(whsec, req(sig), body, time.Hour)
		if err == nil && !strings.Contains(sig, good) {
			t.Fatalf("accepted signature %q, want only %q", sig, good)
		}
		if err != nil && !errors.Is(err, idemhttp.ErrUnverified) {
			t.Fatalf("VerifyWebhook = %v, want an error matching ErrUnverified", err)
		}
		unix, perr := strconv.ParseInt(ts, 10, 64)
		fresh := perr == nil && ts[0] != '+' && ts[0] != '-' && time.Since(time.Unix(unix, 0)).Abs() < time.Hour-time.Minute
		if err := idemhttp.VerifyWebhook(whsec, req(sig, good), body, time.Hour); fresh && id != "" && (key == "" || key == id) && err != nil {
			t.Fatalf("refused a correctly signed request (ts %q, id %q): %v", ts, id, err)
		}
	})
}
