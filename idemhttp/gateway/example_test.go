package gateway_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"github.com/idemhq/idem/idemhttp"
	"github.com/idemhq/idem/idemhttp/gateway"
	"github.com/idemhq/idem/idemmem"
)

// A Go service embeds what `idem serve --upstream http://… --store memory:` does:
// the payment API behind the gateway runs once for a key, and the client's retry
// gets the stored response again.
func Example() {
	var charges atomic.Int32
	payments := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"charge":%d}`, charges.Add(1))
	})}
	upLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	go payments.Serve(upLn)
	defer payments.Close()

	store, err := idemmem.New(idemmem.Config{})
	if err != nil {
		log.Fatal(err)
	}
	g, err := gateway.New(gateway.Config{
		Upstream:    &url.URL{Scheme: "http", Host: upLn.Addr().String()},
		Store:       store,
		Idempotency: idemhttp.Config{Wait: 5 * time.Second}, // a retry waits for the first call, then replays
	})
	if err != nil {
		log.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- g.Run(ctx, ln, nil) }() // a graceful stop when ctx ends

	for range 2 { // a request and its retry
		req, _ := http.NewRequest(http.MethodPost, "http://"+ln.Addr().String()+"/charges", strings.NewReader(`{"amount":42}`))
		req.Header.Set("Idempotency-Key", "order-17")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			log.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		fmt.Println(resp.StatusCode, string(body), "replayed:", resp.Header.Get("Idempotent-Replayed") == "true")
	}
	stop()
	fmt.Println("stopped:", <-done, "charges:", charges.Load())
	// Output:
	// 201 {"charge":1} replayed: false
	// 201 {"charge":1} replayed: true
	// stopped: <nil> charges: 1
}
