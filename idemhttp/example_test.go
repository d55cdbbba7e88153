package idemhttp_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemhttp"
)

// A receiver verifies each delivery and processes each Idempotency-Key once; the
// sender (an outbox relay) delivers a message twice, as after a crash.
func ExampleWebhookSink() {
	secret := []byte("a shared secret of 32 bytes or more")
	seen := map[string]bool{} // in production: an idem.Store, in the effect's transaction
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, idem.MaxPayload))
		if err != nil {
			http.Error(w, "body too large", http.StatusRequestEntityTooLarge)
			return
		}
		if err := idemhttp.VerifyWebhook(secret, r, body, 0); err != nil {
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		}
		key := r.Header.Get("Idempotency-Key")
		if seen[key] {
			fmt.Println("duplicate", key, "acknowledged")
			return
		}
		seen[key] = true
		fmt.Printf("%s %s: %s\n", r.Header.Get("Idem-Topic"), key, body)
	}))
	defer receiver.Close()

	sink, err := idemhttp.NewWebhookSink(idemhttp.WebhookConfig{URL: receiver.URL, Secret: secret})
	if err != nil {
		log.Fatal(err)
	}
	m := idem.Message{ID: "order-17", Topic: "orders.created", Payload: []byte(`{"total":42}`)}
	for range 2 {
		if err := sink.Publish(context.Background(), m); err != nil {
			log.Fatal(err)
		}
	}
	// Output:
	// orders.created order-17: {"total":42}
	// duplicate order-17 acknowledged
}
