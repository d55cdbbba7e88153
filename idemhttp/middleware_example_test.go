package idemhttp_test

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"

	"github.com/idemhq/idem/idemhttp"
	"github.com/idemhq/idem/idemmem"
	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/idemsqlite"
)

// exampleSend posts body with the key twice, as a client retrying after a lost
// response would, and prints what each attempt got.
func exampleSend(url, key, body string) {
	for range 2 {
		req, _ := http.NewRequest("POST", url, strings.NewReader(body))
		req.Header.Set("Idempotency-Key", key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			log.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		fmt.Printf("%d %s replayed=%q\n", resp.StatusCode, strings.TrimSpace(string(b)), resp.Header.Get("Idempotent-Replayed"))
	}
}

// A retried POST creates one order: the second attempt gets the first response.
func ExampleMiddleware() {
	store, err := idemmem.New(idemmem.Config{})
	if err != nil {
		log.Fatal(err)
	}
	idempotent, err := idemhttp.Middleware(idemhttp.Config{Store: store})
	if err != nil {
		log.Fatal(err)
	}
	orders := 0
	api := idempotent(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		orders++
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"order":%d}`, orders)
	}))
	srv := httptest.NewServer(api)
	defer srv.Close()

	exampleSend(srv.URL+"/orders", "8e4f0c1a-order-tea", `{"sku":"tea"}`)
	fmt.Println("orders created:", orders)
	// Output:
	// 201 {"order":1} replayed=""
	// 201 {"order":1} replayed="true"
	// orders created: 1
}

// In atomic mode the handler writes through the request's transaction, which also
// holds the key and the stored response: the payment and its response commit
// together, or not at all.
func ExampleAtomicMiddleware() {
	dir, err := os.MkdirTemp("", "idem-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	store, err := idemsqlite.Open(context.Background(), filepath.Join(dir, "app.db"), idemsqlite.Config{})
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	ctx := context.Background()
	if _, err := store.DB().ExecContext(ctx, "CREATE TABLE payments (memo TEXT NOT NULL)"); err != nil {
		log.Fatal(err)
	}
	db, err := idemsql.SQLDB(ctx, store.DB()) // the store's database: one transaction for both
	if err != nil {
		log.Fatal(err)
	}
	idempotent, err := idemhttp.AtomicMiddleware(db, store, idemhttp.Config{})
	if err != nil {
		log.Fatal(err)
	}
	api := idempotent(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tx, _ := idemhttp.TxFrom[*sql.Tx](r.Context())
		memo, _ := io.ReadAll(r.Body)
		if _, err := tx.ExecContext(r.Context(), "INSERT INTO payments (memo) VALUES ($1)", string(memo)); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, "paid: %s\n", memo)
	}))
	srv := httptest.NewServer(api)
	defer srv.Close()

	exampleSend(srv.URL+"/payments", "3b1d9e77-rent-march", "rent, March")
	var n int
	if err := store.DB().QueryRowContext(ctx, "SELECT COUNT(*) FROM payments").Scan(&n); err != nil {
		log.Fatal(err)
	}
	fmt.Println("payments:", n)
	// Output:
	// 201 paid: rent, March replayed=""
	// 201 paid: rent, March replayed="true"
	// payments: 1
}
