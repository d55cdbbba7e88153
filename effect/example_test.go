package effect_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"

	"github.com/idemhq/idem/effect"
	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/idemsqlite"
)

// A charge through the fence: the second Do, a retry, returns the stored result
// and does not call the payment service again.
func ExampleFence_Do() {
	charges := 0
	payments := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		charges++
		fmt.Fprint(w, `{"id":"ch_1"}`)
	}))
	defer payments.Close()

	dir, _ := os.MkdirTemp("", "effect-example-")
	defer os.RemoveAll(dir)
	store, _ := idemsqlite.Open(context.Background(), filepath.Join(dir, "app.db"), idemsqlite.Config{})
	defer store.Close()
	ctx := context.Background()
	db, _ := idemsql.SQLDB(ctx, store.DB())
	fence, err := effect.New(ctx, db, effect.Config{})
	if err != nil {
		panic(err)
	}

	charge := func(ctx context.Context, key string) ([]byte, error) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, payments.URL, nil)
		req.Header.Set("Idempotency-Key", key) // idemkey.Derive("order-42", "charge")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return nil, err
		}
		defer resp.Body.Close()
		return []byte(resp.Status), nil
	}
	for range 2 {
		result, err := fence.Do(ctx, "order-42", "charge", charge)
		fmt.Println(string(result), err)
	}
	fmt.Println("charges:", charges)
	// Output:
	// 200 OK <nil>
	// 200 OK <nil>
	// charges: 1
}
