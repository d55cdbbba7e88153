package idemhttp_test

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemhq/idem/idemhttp"
	"github.com/idemhq/idem/idemmem"
)

// TestTransportThroughMiddleware: the client and the server of this package together.
// The network drops the response of the first two attempts of every request after
// the server executed it; each logical request's effect still happens exactly once
// and the client receives the response of that one execution.
func TestTransportThroughMiddleware(t *testing.T) {
	t.Parallel()
	store, err := idemmem.New(idemmem.Config{})
	if err != nil {
		t.Fatal(err)
	}
	mw, err := idemhttp.Middleware(idemhttp.Config{Store: store, Wait: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	effects := map[string]int{}
	var execs atomic.Int64
	app := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		effects[string(body)]++
		mu.Unlock()
		fmt.Fprintf(w, "order %s placed (execution %d)", body, execs.Add(1))
	}))
	attempts := map[string]int{} // by key
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := httptest.NewRecorder()
		app.ServeHTTP(rec, r) // the server executes (or replays) ...
		mu.Lock()
		attempts[r.Header.Get(idemhttp.HeaderKey)]++
		n := attempts[r.Header.Get(idemhttp.HeaderKey)]
		mu.Unlock()
		if n <= 2 { // ... and the network loses its answer
			trDrop(t, w)
			return
		}
		for k, v := range rec.Header() {
			w.Header()[k] = v
		}
		w.WriteHeader(rec.Code)
		w.Write(rec.Body.Bytes())
	}))
	defer srv.Close()
	client := &http.Client{Transport: &idemhttp.Transport{MinBackoff: time.Millisecond, MaxBackoff: 20 * time.Millisecond}}

	const orders = 40
	var wg sync.WaitGroup
	errs := make(chan error, orders)
	for i := 0; i < orders; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := client.Post(srv.URL+"/orders", "text/plain", bytes.NewBufferString(fmt.Sprint(i)))
			if err != nil {
				errs <- err
				return
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != 200 || !bytes.HasPrefix(body, []byte(fmt.Sprintf("order %d placed", i))) ||
				resp.Header.Get(idemhttp.HeaderReplayed) != "true" {
				errs <- fmt.Errorf("order %d: %d %q replayed=%q", i, resp.StatusCode, body, resp.Header.Get(idemhttp.HeaderReplayed))
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	// Every key reached the server three times: two answers lost, the third delivered.
	// (Who resent does not matter: net/http itself resends a keyed request when a
	// reused connection breaks, so Transport's own count can be lower.)
	for key, n := range attempts {
		if n < 3 {
			t.Errorf("key %s reached the server %d times, want 3", key, n)
		}
	}
	if len(attempts) != orders {
		t.Errorf("%d keys reached the server for %d logical requests", len(attempts), orders)
	}
	if execs.Load() != orders {
		t.Fatalf("%d executions for %d logical requests", execs.Load(), orders)
	}
	for body, n := range effects {
		if n != 1 {
			t.Fatalf("order %s executed %d times", body, n)
		}
	}
}
