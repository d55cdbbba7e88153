package console_test

import (
	"fmt"
	"log/slog"
	"net/http/httptest"

	"github.com/idemhq/idem/admin"
	"github.com/idemhq/idem/admin/console"
	"github.com/prometheus/client_golang/prometheus"
)

// Example mounts the console at / of the admin API, with the registry of idem's
// components as the source of its charts.
func Example() {
	reg := prometheus.NewRegistry() // also the Registerer given to stores, inbox, relay
	h, err := admin.New(admin.Config{
		Token:    "full-access-token-from-a-secret-store",
		Gatherer: reg,
		Console:  console.Handler(),
		Logger:   slog.New(slog.DiscardHandler),
		// Stores, DeadLetters, Outbox, Sagas, …: the areas to show.
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	srv := httptest.NewServer(h) // in production: an http.Server on a private address
	defer srv.Close()

	res, err := srv.Client().Get(srv.URL + "/")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer res.Body.Close()
	fmt.Println(res.Status, res.Header.Get("Content-Type"))
	fmt.Println(res.Header.Get("Content-Security-Policy") == console.ContentSecurityPolicy)
	// Output:
	// 200 OK text/html; charset=utf-8
	// true
}
