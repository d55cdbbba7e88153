package effect_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"

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

// A charge through the keyed path, for a payment service that deduplicates by
// Idempotency-Key: the first attempt charges but fails before DoKeyed records it
// (its answer lost on the way back); the retry sends the same key and the service
// answers with the first charge; a later retry is answered from the record.
func ExampleFence_DoKeyed() {
	var mu sync.Mutex
	charges, byKey := 0, map[string]string{}
	payments := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		key := r.Header.Get("Idempotency-Key")
		if _, ok := byKey[key]; !ok {
			charges++
			byKey[key] = fmt.Sprintf(`{"id":"ch_%d"}`, charges)
		}
		fmt.Fprint(w, byKey[key])
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

	lost := true // the first answer is lost
	charge := func(ctx context.Context, key string) ([]byte, error) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, payments.URL, nil)
		req.Header.Set("Idempotency-Key", key) // idemkey.Derive("order-42", "charge")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return nil, err
		}
		defer resp.Body.Close()
		if lost {
			lost = false
			return nil, errors.New("connection reset")
		}
		return io.ReadAll(resp.Body)
	}
	for range 3 {
		result, err := fence.DoKeyed(ctx, "order-42", "charge", charge)
		fmt.Println(string(result), err)
	}
	fmt.Println("charges:", charges)
	// Output:
	//  connection reset
	// {"id":"ch_1"} <nil>
	// {"id":"ch_1"} <nil>
	// charges: 1
}

// The keyed path with write-behind: DoKeyed returns once the payment service has
// answered, and the record follows in the background, many to a statement. Flush
// before the process exits writes what is left; a record that a crash loses is
// recalled from the service, which answers the retry's same key with the first
// charge.
func ExampleConfig_keyedWriteBehind() {
	payments := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `{"id":"ch_1"}`) // a service that deduplicates by Idempotency-Key
	}))
	defer payments.Close()

	dir, _ := os.MkdirTemp("", "effect-example-")
	defer os.RemoveAll(dir)
	store, _ := idemsqlite.Open(context.Background(), filepath.Join(dir, "app.db"), idemsqlite.Config{})
	defer store.Close()
	ctx := context.Background()
	db, _ := idemsql.SQLDB(ctx, store.DB())
	fence, err := effect.New(ctx, db, effect.Config{KeyedWriteBehind: true})
	if err != nil {
		panic(err)
	}

	charge := func(ctx context.Context, key string) ([]byte, error) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, payments.URL, nil)
		req.Header.Set("Idempotency-Key", key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return nil, err
		}
		defer resp.Body.Close()
		return io.ReadAll(resp.Body)
	}
	result, err := fence.DoKeyed(ctx, "order-42", "charge", charge)
	fmt.Println(string(result), err)

	// At shutdown:
	if err := fence.Flush(ctx); err != nil {
		fmt.Println("records left unwritten:", err)
	}
	recorded, _, _ := fence.Get(ctx, "order-42", "charge")
	fmt.Println(recorded.State, string(recorded.Result))
	// Output:
	// {"id":"ch_1"} <nil>
	// complete {"id":"ch_1"}
}
