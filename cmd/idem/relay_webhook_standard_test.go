package main

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/cmd/idem/internal/open"
)

// The relay's webhook sink with a whsec_ secret from the environment delivers
// requests a Standard Webhooks receiver verifies: the signature is recomputed here
// from the specification, independently of idemhttp.
func TestRelayWebhookStandardSignature(t *testing.T) {
	key := []byte("relay-standard-webhooks-key-32b!")
	t.Setenv("IDEM_WEBHOOK_SECRET", "whsec_"+base64.StdEncoding.EncodeToString(key))
	type delivery struct{ id, topic, sig, ts, idemKey string }
	got := make(chan delivery, 16)
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mac := hmac.New(sha256.New, key)
		mac.Write([]byte(r.Header.Get("webhook-id") + "." + r.Header.Get("webhook-timestamp") + "." + string(body)))
		want := "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil))
		if !strings.Contains(" "+r.Header.Get("webhook-signature")+" ", " "+want+" ") {
			http.Error(w, "bad signature", http.StatusUnauthorized)
			return
		}
		got <- delivery{r.Header.Get("webhook-id"), r.Header.Get("Idem-Topic"), r.Header.Get("webhook-signature"),
			r.Header.Get("webhook-timestamp"), r.Header.Get("Idempotency-Key")}
	}))
	t.Cleanup(receiver.Close)
	path, _, enqueue := sqliteOutbox(t, "orders.created")
	enqueue("std-1")
	r := startRelay(t, "--db", "sqlite:"+path, "--sink", receiver.URL+"/hook", "--poll", "50ms")
	select {
	case d := <-got:
		if d.id != "std-1" || d.idemKey != "std-1" || d.topic != "orders.created" {
			t.Errorf("delivered webhook-id %q, Idempotency-Key %q, topic %q; want std-1, std-1, orders.created", d.id, d.idemKey, d.topic)
		}
	case <-time.After(time.Minute):
		t.Fatalf("no verified delivery within a minute; relay output:\n%s", r.stderr)
	}
	if strings.Contains(r.stderr.String(), base64.StdEncoding.EncodeToString(key)) {
		t.Errorf("the relay printed its secret:\n%s", r.stderr)
	}
}

// A malformed whsec_ secret is refused naming the flag and the environment
// variable, without quoting the secret.
func TestRelayRefusesBadStandardSecret(t *testing.T) {
	t.Setenv("IDEM_WEBHOOK_SECRET", "")
	file := filepath.Join(t.TempDir(), "app.db")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, secret := range []string{"whsec_not!base64!secretvalue-0123456789", "whsec_" + base64.StdEncoding.EncodeToString([]byte("short-key"))} {
		o := &relayOptions{db: "sqlite:" + file, sink: "https://example.com/hook",
			batch: 1, roundBatches: 1, poll: time.Second, maxAttempts: 1, retention: time.Hour,
			SinkFlags: open.SinkFlags{WebhookSecret: secret, WebhookTimeout: time.Second}}
		_, _, err := o.check()
		var ie *idem.InputError
		if !errors.As(err, &ie) || !strings.Contains(ie.Field, "--webhook-secret") || !strings.Contains(ie.Field, "$IDEM_WEBHOOK_SECRET") ||
			strings.Contains(err.Error(), secret[6:]) {
			t.Errorf("secret %q…: check = %v, want an *idem.InputError naming the flag, without the secret", secret[:8], err)
		}
	}
}
