package idemhttp_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemhttp"
	"github.com/idemhq/idem/internal/testsvc"
)

var secret = []byte("0123456789abcdef0123456789abcdef")

// received is one request as the receiver saw it.
type received struct {
	req  *http.Request
	body []byte
}

// with returns a copy of the received request whose header name is value.
func (g received) with(name, value string) *http.Request {
	r := g.req.Clone(context.Background())
	r.Header.Set(name, value)
	return r
}

// also returns a copy of the received request with value added to header name.
func (g received) also(name, value string) *http.Request {
	r := g.req.Clone(context.Background())
	r.Header.Add(name, value)
	return r
}

// receiver is an httptest server that records requests and answers each with the
// status status returns (200 when nil).
type receiver struct {
	srv    *httptest.Server
	mu     sync.Mutex
	got    []received
	status func(r *http.Request, n int) int
}

func newReceiver(t *testing.T, status func(r *http.Request, n int) int) *receiver {
	t.Helper()
	rc := &receiver{status: status}
	rc.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		rc.mu.Lock()
		rc.got = append(rc.got, received{req: r, body: body})
		n := len(rc.got)
		rc.mu.Unlock()
		code := http.StatusOK
		if rc.status != nil {
			code = rc.status(r, n)
		}
		w.WriteHeader(code)
		if code >= 300 {
			_, _ = io.WriteString(w, "try later")
		}
	}))
	t.Cleanup(rc.srv.Close)
	return rc
}

func (rc *receiver) requests() []received {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]received(nil), rc.got...)
}

func (rc *receiver) sink(t *testing.T) *idemhttp.WebhookSink {
	t.Helper()
	s, err := idemhttp.NewWebhookSink(idemhttp.WebhookConfig{URL: rc.srv.URL + "/hooks", Secret: secret})
	if err != nil {
		t.Fatalf("NewWebhookSink: %v", err)
	}
	return s
}

// signV2 computes the signature from the package documentation, independently of
// the package's own code.
func signV2(key []byte, ts, id, topic, contentType string, body []byte) string {
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(ts + "\n" + id + "\n" + topic + "\n" + contentType + "\n" + string(body)))
	return "v2=" + hex.EncodeToString(mac.Sum(nil))
}

// signV1 is the signature of idem before v2, which did not cover Content-Type.
func signV1(key []byte, ts, id, topic string, body []byte) string {
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(ts + "\n" + id + "\n" + topic + "\n" + string(body)))
	return "v1=" + hex.EncodeToString(mac.Sum(nil))
}

func TestWebhookHeadersAndSignature(t *testing.T) {
	t.Parallel()
	rc := newReceiver(t, nil)
	msgs := []idem.Message{
		{ID: "order-1.created", Topic: "orders.created", Payload: []byte(`{"total":42}`),
			Headers: map[string]string{"Content-Type": "application/json", "trace_id": "t-1",
				"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}},
		{ID: "order-2.created", Topic: "orders.created", Payload: []byte{0, 1, 2}},
	}
	if err := rc.sink(t).Publish(context.Background(), msgs...); err != nil {
		t.Fatalf("Publish: %v", err)
	}
	got := rc.requests()
	if len(got) != 2 {
		t.Fatalf("receiver got %d requests, want 2", len(got))
	}
	for i, g := range got {
		m, h := msgs[i], g.req.Header
		if g.req.Method != http.MethodPost || g.req.URL.Path != "/hooks" || string(g.body) != string(m.Payload) {
			t.Errorf("request %d: %s %s body %q, want POST /hooks body %q", i, g.req.Method, g.req.URL.Path, g.body, m.Payload)
		}
		if h.Get("Idempotency-Key") != m.ID || h.Get("Idem-Topic") != m.Topic {
			t.Errorf("request %d: Idempotency-Key %q, Idem-Topic %q; want %q, %q", i, h.Get("Idempotency-Key"), h.Get("Idem-Topic"), m.ID, m.Topic)
		}
		if err := idemhttp.VerifyWebhook(secret, g.req, g.body, time.Minute); err != nil {
			t.Errorf("request %d: VerifyWebhook: %v", i, err)
		}
		if want := signV2(secret, h.Get("Idem-Timestamp"), m.ID, m.Topic, h.Get("Content-Type"), m.Payload); h.Get("Idem-Signature") != want {
			t.Errorf("request %d: Idem-Signature %q, want the documented %q", i, h.Get("Idem-Signature"), want)
		}
		ts, err := strconv.ParseInt(h.Get("Idem-Timestamp"), 10, 64)
		if err != nil || time.Since(time.Unix(ts, 0)).Abs() > time.Minute {
			t.Errorf("request %d: Idem-Timestamp %q is not the current Unix time", i, h.Get("Idem-Timestamp"))
		}
	}
	h0, h1 := got[0].req.Header, got[1].req.Header
	if h0.Get("Content-Type") != "application/json" || h0.Get("Idem-Header-Trace_id") != "t-1" || h0.Get("Idem-Header-Content-Type") != "application/json" {
		t.Errorf("message headers not carried: %v", h0)
	}
	if h0.Get("Traceparent") != msgs[0].Headers["traceparent"] || h1.Get("Traceparent") != "" {
		t.Errorf("traceparent sent as %q and %q, want the message's %q and none", h0.Get("Traceparent"), h1.Get("Traceparent"), msgs[0].Headers["traceparent"])
	}
	if h1.Get("Content-Type") != "application/octet-stream" {
		t.Errorf("Content-Type without a header = %q, want application/octet-stream", h1.Get("Content-Type"))
	}
}

func TestWebhookStopsAtFirstFailure(t *testing.T) {
	t.Parallel()
	rc := newReceiver(t, func(r *http.Request, _ int) int {
		if r.Header.Get("Idempotency-Key") == "b" {
			return http.StatusInternalServerError
		}
		return http.StatusNoContent
	})
	err := rc.sink(t).Publish(context.Background(),
		idem.Message{ID: "a", Topic: "t"}, idem.Message{ID: "b", Topic: "t"}, idem.Message{ID: "c", Topic: "t"})
	var be *idem.BackendError
	if !errors.As(err, &be) || be.Backend != "webhook" || be.Op != "publish" || !idem.IsRetryable(err) {
		t.Fatalf("Publish = %v, want a retryable *idem.BackendError{Backend: webhook, Op: publish}", err)
	}
	for _, want := range []string{`"b"`, "2 of 3", "500", "try later"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %s", err, want)
		}
	}
	if got := rc.requests(); len(got) != 2 || got[1].req.Header.Get("Idempotency-Key") != "b" {
		t.Fatalf("receiver got %d requests, want a then b and nothing after the failure", len(got))
	}
	// The relay sends only b and c again: a was delivered.
	var pe *idem.PublishError
	if !errors.As(err, &pe) || !slices.Equal(pe.Accepted, []bool{true, false, false}) {
		t.Fatalf("Publish = %v, want an *idem.PublishError accepting a only", err)
	}
	// A failure on the first message accepts nothing: a plain BackendError.
	err = rc.sink(t).Publish(context.Background(), idem.Message{ID: "b", Topic: "t"}, idem.Message{ID: "c", Topic: "t"})
	if !errors.As(err, &be) || errors.As(err, &pe) {
		t.Fatalf("Publish failing on its first message = %v, want a *idem.BackendError and no PublishError", err)
	}
}

// A request of an idem before the Standard Webhooks headers, signed v2 only, is
// verified by its Idem-Signature, which covers the topic and Content-Type.
func TestWebhookVerificationRefusesForgeries(t *testing.T) {
	t.Parallel()
	rc := newReceiver(t, nil)
	m := idem.Message{ID: "pay-7", Topic: "payments", Payload: []byte(`{"amount":100}`)}
	if err := rc.sink(t).Publish(context.Background(), m); err != nil {
		t.Fatalf("Publish: %v", err)
	}
	g := rc.requests()[0]
	for _, h := range []string{"Webhook-Id", "Webhook-Timestamp", "Webhook-Signature"} {
		g.req.Header.Del(h)
	}
	ts := g.req.Header.Get("Idem-Timestamp")
	old := strconv.FormatInt(time.Now().Add(-time.Hour).Unix(), 10)
	for _, c := range []struct {
		name string
		key  []byte
		req  *http.Request
		body []byte
	}{
		{"tampered body", secret, g.req, []byte(`{"amount":999}`)},
		{"other topic", secret, g.with("Idem-Topic", "refunds"), g.body},
		{"other key", secret, g.with("Idempotency-Key", "pay-8"), g.body},
		{"wrong secret", []byte("not the secret, but just as long."), g.req, g.body},
		{"no signature", secret, g.with("Idem-Signature", ""), g.body},
		{"no timestamp", secret, g.with("Idem-Timestamp", ""), g.body},
		{"old timestamp, correctly signed", secret, func() *http.Request {
			r := g.with("Idem-Timestamp", old)
			r.Header.Set("Idem-Signature", signV2(secret, old, m.ID, m.Topic, "application/octet-stream", m.Payload))
			return r
		}(), g.body},
		// The receiver may read another value than the one signed.
		{"second Idempotency-Key", secret, g.also("Idempotency-Key", "pay-8"), g.body},
		{"second Idem-Topic", secret, g.also("Idem-Topic", "refunds"), g.body},
		{"second Idem-Timestamp", secret, g.also("Idem-Timestamp", ts), g.body},
		{"second Content-Type", secret, g.also("Content-Type", "application/json"), g.body},
		// The body replayed as another type: JSON read as a form, say.
		{"other Content-Type", secret, g.with("Content-Type", "application/x-www-form-urlencoded"), g.body},
		{"no Content-Type", secret, g.with("Content-Type", ""), g.body},
		// A v1 signature does not cover Content-Type: it cannot verify a request
		// whose type was changed, so it verifies none.
		{"v1 signature, other Content-Type", secret, func() *http.Request {
			r := g.with("Content-Type", "application/x-www-form-urlencoded")
			r.Header.Set("Idem-Signature", signV1(secret, ts, m.ID, m.Topic, m.Payload))
			return r
		}(), g.body},
	} {
		if err := idemhttp.VerifyWebhook(c.key, c.req, c.body, time.Minute); !errors.Is(err, idemhttp.ErrUnverified) {
			t.Errorf("%s: VerifyWebhook = %v, want ErrUnverified", c.name, err)
		}
	}
	v1 := g.with("Idem-Signature", signV1(secret, ts, m.ID, m.Topic, m.Payload))
	if err := idemhttp.VerifyWebhook(secret, v1, g.body, 0); err == nil || !strings.Contains(err.Error(), "upgrade the sender") {
		t.Errorf("a v1 signature: %v, want a refusal that says to upgrade the sender", err)
	}
	// Rotation: any one matching v2= value verifies.
	rot := g.with("Idem-Signature", "v2=00ff, "+g.req.Header.Get("Idem-Signature"))
	if err := idemhttp.VerifyWebhook(secret, rot, g.body, 0); err != nil {
		t.Errorf("two signatures, the second right: %v", err)
	}
	if err := idemhttp.VerifyWebhook(nil, g.req, g.body, 0); !errors.Is(err, idem.ErrInvalid) {
		t.Errorf("empty secret: %v, want an *idem.InputError", err)
	}
	// A receiver configured with a short secret is refused like a sender would be:
	// a signature made with a guessable secret proves nothing.
	short := []byte("k")
	forged := g.with("Idem-Signature", signV2(short, ts, m.ID, m.Topic, "application/octet-stream", m.Payload))
	if err := idemhttp.VerifyWebhook(short, forged, g.body, 0); !errors.Is(err, idem.ErrInvalid) || !strings.Contains(err.Error(), "32") {
		t.Errorf("1-byte secret: %v, want an *idem.InputError naming the 32-byte minimum", err)
	}
}

// The relay retries a failed batch: every attempt of a message carries its ID.
func TestWebhookRetryKeepsIdempotencyKey(t *testing.T) {
	t.Parallel()
	rc := newReceiver(t, func(_ *http.Request, n int) int {
		if n == 1 {
			return http.StatusServiceUnavailable
		}
		return http.StatusOK
	})
	s, m := rc.sink(t), idem.Message{ID: "mail-9", Topic: "mail", Payload: []byte("hi")}
	if err := s.Publish(context.Background(), m); !idem.IsRetryable(err) {
		t.Fatalf("first attempt: %v, want a retryable error", err)
	}
	if err := s.Publish(context.Background(), m); err != nil {
		t.Fatalf("retry: %v", err)
	}
	got := rc.requests()
	if len(got) != 2 {
		t.Fatalf("receiver got %d requests, want 2", len(got))
	}
	for i, g := range got {
		if k := g.req.Header.Get("Idempotency-Key"); k != m.ID {
			t.Errorf("attempt %d: Idempotency-Key %q, want %q", i+1, k, m.ID)
		}
		if err := idemhttp.VerifyWebhook(secret, g.req, g.body, 0); err != nil {
			t.Errorf("attempt %d: %v", i+1, err)
		}
	}
}

func TestWebhookFailures(t *testing.T) {
	t.Parallel()
	redirect := newReceiver(t, func(*http.Request, int) int { return http.StatusFound })
	m := idem.Message{ID: "k", Topic: "t"}
	if err := redirect.sink(t).Publish(context.Background(), m); err == nil || !strings.Contains(err.Error(), "302") {
		t.Errorf("302: Publish = %v, want a failure naming the status (redirects are not followed)", err)
	}

	down, err := idemhttp.NewWebhookSink(idemhttp.WebhookConfig{URL: "http://" + testsvc.ClosedAddr(t) + "/", Secret: secret})
	if err != nil {
		t.Fatal(err)
	}
	if err := down.Publish(context.Background(), m); !idem.IsRetryable(err) || !strings.Contains(err.Error(), `"k"`) {
		t.Errorf("connection refused: Publish = %v, want a retryable error naming the message", err)
	}

	ok := newReceiver(t, nil)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := ok.sink(t).Publish(ctx, m); err == nil || idem.IsRetryable(err) {
		t.Errorf("cancelled ctx: Publish = %v, want a final error", err)
	}

	// A bad message anywhere in the batch: nothing is sent.
	for _, bad := range []idem.Message{
		{ID: "", Topic: "t"},
		{ID: "k", Topic: "t\r\nX-Evil: 1"},
		{ID: "k", Topic: "t", Headers: map[string]string{"bad name": "v"}},
		{ID: "k", Topic: "t", Headers: map[string]string{"h": "line\nbreak"}},
		{ID: "k", Topic: "t", Headers: map[string]string{"h": "1", "H": "2"}},
		{ID: " k", Topic: "t"},
		{ID: "k", Topic: "t\t"},
		{ID: "k", Topic: "t", Headers: map[string]string{"h": "v "}},
	} {
		if err := ok.sink(t).Publish(context.Background(), m, bad); !errors.Is(err, idem.ErrInvalid) {
			t.Errorf("bad message %+v: Publish = %v, want an *idem.InputError", bad, err)
		}
	}
	if n := len(ok.requests()); n != 0 {
		t.Errorf("receiver got %d requests from refused batches, want 0", n)
	}
}

func TestWebhookConfig(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		cfg   idemhttp.WebhookConfig
		field string
	}{
		{idemhttp.WebhookConfig{Secret: secret}, "WebhookConfig.URL"},
		{idemhttp.WebhookConfig{URL: "ftp://example.com/x", Secret: secret}, "WebhookConfig.URL"},
		{idemhttp.WebhookConfig{URL: "https:///x", Secret: secret}, "WebhookConfig.URL"},
		{idemhttp.WebhookConfig{URL: "https://example.com/x"}, "WebhookConfig.Secret"},
		{idemhttp.WebhookConfig{URL: "https://example.com/x", Secret: secret, Timeout: -1}, "WebhookConfig.Timeout"},
	} {
		_, err := idemhttp.NewWebhookSink(c.cfg)
		var ie *idem.InputError
		if !errors.As(err, &ie) || ie.Field != c.field {
			t.Errorf("%+v: err %v, want an *idem.InputError on %s", c.cfg, err, c.field)
		}
	}
	_, err := idemhttp.NewWebhookSink(idemhttp.WebhookConfig{URL: "https://example.com/x"})
	if err == nil || !strings.Contains(err.Error(), "forge") {
		t.Errorf("empty secret: %v, want an error saying why a secret is needed", err)
	}
	_, err = idemhttp.NewWebhookSink(idemhttp.WebhookConfig{URL: "ftp://user:hunter2@example.com/", Secret: secret})
	if err == nil || strings.Contains(err.Error(), "hunter2") {
		t.Errorf("bad URL with a password: %v, want an error that hides the password", err)
	}
	s, err := idemhttp.NewWebhookSink(idemhttp.WebhookConfig{URL: "https://example.com/x", Secret: secret})
	if err != nil {
		t.Fatal(err)
	}
	if f := s.Features(); f.Dedup || !f.OrderedPerKey {
		t.Errorf("Features = %+v, want no dedup, ordered", f)
	}
}

// A secret shorter than 32 bytes can be guessed from one signed request: refused,
// with the fix.
func TestWebhookRefusesShortSecrets(t *testing.T) {
	t.Parallel()
	for _, n := range []int{1, 16, idemhttp.MinWebhookSecret - 1} {
		_, err := idemhttp.NewWebhookSink(idemhttp.WebhookConfig{URL: "https://example.com/x", Secret: secret[:n]})
		var ie *idem.InputError
		if !errors.As(err, &ie) || ie.Field != "WebhookConfig.Secret" || !strings.Contains(err.Error(), "openssl rand -hex 32") {
			t.Errorf("%d-byte secret: err %v, want an *idem.InputError on WebhookConfig.Secret with the fix", n, err)
		}
	}
	if _, err := idemhttp.NewWebhookSink(idemhttp.WebhookConfig{URL: "https://example.com/x", Secret: secret[:idemhttp.MinWebhookSecret]}); err != nil {
		t.Errorf("32-byte secret: %v, want it accepted", err)
	}
}

// Errors name the webhook without its credentials: neither a password nor a
// secret query value, on a network failure or a refusal.
func TestWebhookErrorsHideSecrets(t *testing.T) {
	t.Parallel()
	const pw, token = "hunter2hunter2", "tok3nTOK3N"
	m := idem.Message{ID: "k", Topic: "t"}
	down, err := idemhttp.NewWebhookSink(idemhttp.WebhookConfig{
		URL: "http://u:" + pw + "@" + testsvc.ClosedAddr(t) + "/hook?token=" + token, Secret: secret})
	if err != nil {
		t.Fatal(err)
	}
	if err := down.Publish(context.Background(), m); err == nil || strings.Contains(err.Error(), pw) || strings.Contains(err.Error(), token) {
		t.Errorf("connection refused: Publish = %v, want an error without the password or the token", err)
	}

	refusing := newReceiver(t, func(*http.Request, int) int { return http.StatusInternalServerError })
	s, err := idemhttp.NewWebhookSink(idemhttp.WebhookConfig{URL: refusing.srv.URL + "/hook?token=" + token, Secret: secret})
	if err != nil {
		t.Fatal(err)
	}
	err = s.Publish(context.Background(), m)
	var se *idemhttp.StatusError
	if !errors.As(err, &se) || se.StatusCode != http.StatusInternalServerError || se.Body != "try later" || strings.Contains(err.Error(), token) {
		t.Errorf("500: Publish = %v, want a *StatusError with the status and body, without the token", err)
	}
}

// FuzzVerifyWebhook feeds VerifyWebhook any timestamp, key, topic, Content-Type,
// signature header and body: it never panics, refuses with ErrUnverified whatever
// is not the exact v2 signature, and accepts a correctly signed request, even
// beside other versions and garbage in the same header.
func FuzzVerifyWebhook(f *testing.F) {
	now := strconv.FormatInt(time.Now().Unix(), 10)
	f.Add(now, "order-1", "orders", "application/json", "v2=00", []byte("{}"))
	f.Add("", "", "", "", "", []byte(nil))
	f.Add("+1", "k", "t", "", "v2=", []byte("x"))
	f.Add("-0", "k", "t", "text/plain", "v0=abc, v2=zz,,v2", []byte("x"))
	f.Add("99999999999999999999", "k", "t", "x", "v2="+strings.Repeat("0", 64), []byte("x"))
	f.Add(now, "k\n", "t\r\n", "a\nb", "v2=ABCDEF", []byte{0, 1, 2})
	f.Fuzz(func(t *testing.T, ts, id, topic, contentType, sig string, body []byte) {
		req := func(sigs ...string) *http.Request {
			r := httptest.NewRequest(http.MethodPost, "/hook", nil)
			r.Header[idemhttp.HeaderTimestamp] = []string{ts}
			r.Header[idemhttp.HeaderIdempotencyKey] = []string{id}
			r.Header[idemhttp.HeaderTopic] = []string{topic}
			r.Header["Content-Type"] = []string{contentType}
			r.Header[idemhttp.HeaderSignature] = sigs
			return r
		}
		good := signV2(secret, ts, id, topic, contentType, body)
		err := idemhttp.VerifyWebhook(secret, req(sig), body, time.Hour)
		if err == nil && !strings.Contains(sig, good) && !strings.Contains(strings.ToLower(sig), good) {
			t.Fatalf("accepted signature %q, want only %q", sig, good)
		}
		if err != nil && !errors.Is(err, idemhttp.ErrUnverified) {
			t.Fatalf("VerifyWebhook = %v, want an error matching ErrUnverified", err)
		}
		// Correctly signed, beside whatever else the header holds.
		unix, perr := strconv.ParseInt(ts, 10, 64)
		fresh := perr == nil && ts[0] != '+' && ts[0] != '-' && time.Since(time.Unix(unix, 0)).Abs() < time.Hour-time.Minute
		if err := idemhttp.VerifyWebhook(secret, req(sig, good), body, time.Hour); fresh && id != "" && err != nil {
			t.Fatalf("refused a correctly signed request (ts %q, id %q, topic %q): %v", ts, id, topic, err)
		}
	})
}

// FuzzWebhookRoundTrip sends one message through a WebhookSink to a receiver that
// verifies it: every message the sink accepts arrives verified, with its ID as the
// Idempotency-Key, its topic and its headers unchanged. HTTP trims the spaces around
// header values, so a message that would arrive changed must be refused instead
// (an ID " a" would be deduplicated with the message "a").
func FuzzWebhookRoundTrip(f *testing.F) {
	type got struct {
		id, topic string
		headers   map[string]string
		err       error
	}
	last := make(chan got, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		g := got{id: r.Header.Get(idemhttp.HeaderIdempotencyKey), topic: r.Header.Get(idemhttp.HeaderTopic),
			err: idemhttp.VerifyWebhook(secret, r, body, time.Minute)}
		for k, vs := range r.Header {
			if name, ok := strings.CutPrefix(k, idemhttp.HeaderPrefix); ok {
				if g.headers == nil {
					g.headers = map[string]string{}
				}
				g.headers[strings.ToLower(name)] = vs[0]
			}
		}
		last <- g
	}))
	f.Cleanup(srv.Close)
	sink, err := idemhttp.NewWebhookSink(idemhttp.WebhookConfig{URL: srv.URL, Secret: secret})
	if err != nil {
		f.Fatal(err)
	}
	f.Add("order-1", "orders", "Trace-Id", "abc", []byte("{}"))
	f.Add(" a", "orders", "h", "v", []byte{})
	f.Add("a", "orders ", "h", "\tv", []byte{})
	f.Add("a", "t", "h", "ü\x80", []byte{})
	f.Fuzz(func(t *testing.T, id, topic, k, v string, body []byte) {
		m := idem.Message{ID: id, Topic: topic, Payload: body, Headers: map[string]string{k: v}}
		err := sink.Publish(context.Background(), m)
		if errors.Is(err, idem.ErrInvalid) {
			return // refused before sending, with a clear error
		}
		if err != nil {
			t.Fatalf("Publish(%+v) = %v", m, err)
		}
		g := <-last
		if g.err != nil || g.id != id || g.topic != topic || g.headers[strings.ToLower(k)] != v {
			t.Fatalf("sent ID %q topic %q header %q=%q; receiver got ID %q topic %q headers %q, verify %v",
				id, topic, k, v, g.id, g.topic, g.headers, g.err)
		}
	})
}
