package webhook_test

import (
	"context"
	"crypto/rand"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemhttp"
	"github.com/idemhq/idem/webhook"
)

// idem's own relay webhook sink and this package's Standard verifier agree: what
// the sink signs, with a raw secret or a whsec_ one, the receiver verifies (and the
// event id is the message id), and a body changed on the way is refused.
func TestStandardVerifiesIdemSink(t *testing.T) {
	t.Parallel()
	raw := make([]byte, 32)
	rand.Read(raw)
	for _, secret := range [][]byte{raw, []byte(idemhttp.StandardWebhookSecret(raw))} {
		type got struct {
			h    http.Header
			body []byte
		}
		deliveries := make(chan got, 1)
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			body, _ := io.ReadAll(r.Body)
			deliveries <- got{r.Header.Clone(), body}
		}))
		sink, err := idemhttp.NewWebhookSink(idemhttp.WebhookConfig{URL: srv.URL, Secret: secret})
		if err != nil {
			t.Fatal(err)
		}
		if err := sink.Publish(context.Background(), idem.Message{ID: "msg-1", Topic: "orders", Payload: []byte(`{"n":1}`)}); err != nil {
			t.Fatal(err)
		}
		srv.Close()
		d := <-deliveries
		v, err := webhook.Standard(idemhttp.StandardWebhookSecret(raw))
		if err != nil {
			t.Fatal(err)
		}
		id, err := v.Verify(d.h, d.body, time.Now())
		if err != nil || id != "msg-1" {
			t.Fatalf("secret %.6s…: Verify = %q, %v; want msg-1", secret, id, err)
		}
		if _, err := v.Verify(d.h, []byte(strings.Replace(string(d.body), "1", "2", 1)), time.Now()); err == nil {
			t.Fatal("a body changed on the way verified")
		}
	}
}
