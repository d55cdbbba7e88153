package idemhttp_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"time"

	"github.com/idemhq/idem/idemhttp"
	"github.com/idemhq/idem/idemkey"
)

// A payment API is briefly unavailable. The client retries the POST under one
// Idempotency-Key, so the server, which remembers the keys it has charged, charges
// once.
func ExampleTransport() {
	var mu sync.Mutex
	charged := map[string]bool{}
	attempts := 0
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		if attempts++; attempts == 1 {
			w.Header().Set("Retry-After", "0")
			http.Error(w, "try again", http.StatusServiceUnavailable)
			return
		}
		key := r.Header.Get(idemhttp.HeaderKey)
		if !charged[key] {
			charged[key] = true
			fmt.Println("charging once")
		}
		fmt.Fprintln(w, "charged")
	}))
	defer api.Close()

	client := &http.Client{Transport: &idemhttp.Transport{MinBackoff: 10 * time.Millisecond}}
	resp, err := client.Post(api.URL+"/charges", "application/json", strings.NewReader(`{"amount":4200}`))
	if err != nil {
		log.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	fmt.Printf("%s after %d attempts: %s", resp.Status, idemhttp.Attempts(resp), body)
	// Output:
	// charging once
	// 200 OK after 2 attempts: charged
}

// A consumer handles message "msg-42" and calls an API. If it crashes and handles
// the message again, its call carries the same key, derived from the message's, and
// the API answers with its first response instead of acting twice.
func ExampleWithKey() {
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, r.Header.Get(idemhttp.HeaderKey))
	}))
	defer api.Close()
	client := &http.Client{Transport: &idemhttp.Transport{}}

	handle := func(ctx context.Context, messageID string) string {
		ctx = idemhttp.WithKey(ctx, messageID)
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, api.URL+"/shipments", strings.NewReader("{}"))
		resp, err := client.Do(req)
		if err != nil {
			log.Fatal(err)
		}
		defer resp.Body.Close()
		key, _ := io.ReadAll(resp.Body)
		return string(key)
	}
	first, again := handle(context.Background(), "msg-42"), handle(context.Background(), "msg-42")
	fmt.Println("same key on redelivery:", first == again)
	fmt.Println("derived from the message:", first == idemkey.Derive("msg-42", "POST "+api.Listener.Addr().String()+"/shipments"))
	// Output:
	// same key on redelivery: true
	// derived from the message: true
}
