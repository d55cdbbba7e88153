package admin_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/admin"
)

// Example mounts the admin API in a server next to the application's own routes,
// and looks at a key with the read-only token.
func Example() {
	store := &fakeInspector{recs: map[idem.Key]idem.Record{}} // in production: a store of this module
	store.put(idem.Record{Key: idem.Key{Scope: "tenant-1", ID: "order-42"}, State: idem.StateCompleted,
		Token: 7, Result: []byte(`{"status":"paid"}`)})

	cfg := admin.Config{
		Token:     "full-access-token-from-a-secret-store",
		ReadToken: "read-only-token-from-a-secret-store",
		Stores:    map[string]idem.Inspector{"orders": store},
		Logger:    slog.New(slog.DiscardHandler),
	}
	// A daemon checks its listen address first: without a token, loopback only.
	if err := admin.CheckListen("0.0.0.0:9090", cfg); err != nil {
		panic(err)
	}
	api, err := admin.New(cfg)
	if err != nil {
		panic(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/api/", api) // the admin API owns /api/
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	srv := httptest.NewServer(mux) // in production: http.Server{Addr: ..., Handler: mux}
	defer srv.Close()

	req, _ := http.NewRequestWithContext(context.Background(), "GET", srv.URL+"/api/key?scope=tenant-1&id=order-42", nil)
	req.Header.Set("Authorization", "Bearer read-only-token-from-a-secret-store")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		panic(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	fmt.Println(resp.Status)
	fmt.Println(strings.Contains(string(body), `"state":"completed"`), strings.Contains(string(body), `"preview":"{\"status\":\"paid\"}"`))
	// Output:
	// 200 OK
	// true true
}
