package idemhttp

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/idemhq/idem"
)

// The published test vector of Standard Webhooks 1.0 (the specification's
// libraries test it): the secret, message, timestamp and body below sign as
// vectorSignature.
const (
	vectorSecret    = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	vectorID        = "msg_p5jXN8AQM9LWM0D4loKWxJek"
	vectorTimestamp = 1614265330
	vectorBody      = `{"test": 2432232314}`
	vectorSignature = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
)

// The sink signs the vector's message as the specification does, byte for byte, so
// any Standard Webhooks library verifies idem's webhooks.
func TestWebhookSinkSignsTheStandardVector(t *testing.T) {
	t.Parallel()
	got := make(chan http.Header, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		got <- r.Header.Clone()
	}))
	t.Cleanup(srv.Close)
	s, err := NewWebhookSink(WebhookConfig{URL: srv.URL, Secret: []byte(vectorSecret)})
	if err != nil {
		t.Fatal(err)
	}
	s.now = func() time.Time { return time.Unix(vectorTimestamp, 0) }
	if err := s.Publish(context.Background(), idem.Message{ID: vectorID, Topic: "test", Payload: []byte(vectorBody)}); err != nil {
		t.Fatal(err)
	}
	h := <-got
	if h.Get("webhook-id") != vectorID || h.Get("webhook-timestamp") != "1614265330" || h.Get("webhook-signature") != vectorSignature {
		t.Errorf("webhook-id %q, webhook-timestamp %q, webhook-signature %q; want %q, 1614265330, %q",
			h.Get("webhook-id"), h.Get("webhook-timestamp"), h.Get("webhook-signature"), vectorID, vectorSignature)
	}
}

// VerifyWebhook accepts the vector's request at its time, also with the whsec_
// secret among others (rotation) and the signature among others, and refuses it
// past the tolerance or with its body changed.
func TestVerifyWebhookStandardVector(t *testing.T) {
	t.Parallel()
	req := func(sig string) *http.Request {
		r := httptest.NewRequest(http.MethodPost, "/hook", strings.NewReader(vectorBody))
		r.Header.Set("webhook-id", vectorID)
		r.Header.Set("webhook-timestamp", "1614265330")
		r.Header.Set("webhook-signature", sig)
		return r
	}
	at := time.Unix(vectorTimestamp, 0)
	other := []byte("whsec_" + strings.Repeat("QUJD", 8)) // 24 bytes: "ABC"×8
	for _, c := range []struct {
		name    string
		secrets [][]byte
		sig     string
		now     time.Time
		body    string
		ok      bool
	}{
		{"the vector", [][]byte{[]byte(vectorSecret)}, vectorSignature, at, vectorBody, true},
		{"rotated secrets", [][]byte{other, []byte(vectorSecret)}, vectorSignature, at, vectorBody, true},
		{"several signatures", [][]byte{[]byte(vectorSecret)}, "v1a,AAAA v1,AAAA " + vectorSignature, at.Add(4 * time.Minute), vectorBody, true},
		{"other secret", [][]byte{other}, vectorSignature, at, vectorBody, false},
		{"past the tolerance", [][]byte{[]byte(vectorSecret)}, vectorSignature, at.Add(6 * time.Minute), vectorBody, false},
		{"ahead of the tolerance", [][]byte{[]byte(vectorSecret)}, vectorSignature, at.Add(-6 * time.Minute), vectorBody, false},
		{"other body", [][]byte{[]byte(vectorSecret)}, vectorSignature, at, `{"test": 2432232315}`, false},
		{"v1a only", [][]byte{[]byte(vectorSecret)}, "v1a," + strings.TrimPrefix(vectorSignature, "v1,"), at, vectorBody, false},
	} {
		err := verifyWebhook(c.secrets, req(c.sig), []byte(c.body), 0, c.now)
		if c.ok && err != nil || !c.ok && err == nil {
			t.Errorf("%s: verifyWebhook = %v, want ok %v", c.name, err, c.ok)
		}
	}
}
