package idemhttp_test

import (
	"bytes"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/idemhq/idem/idemhttp"
	"github.com/idemhq/idem/idemkey"
)

// A handler that runs far longer than its lease keeps its key: the middleware
// renews the lease while the handler runs, so a retry meanwhile gets 409 instead of
// taking the key over and running the handler a second time, and after the first
// run the retry replays its response.
func TestMiddlewareRenewsLeaseOfSlowHandler(t *testing.T) {
	t.Parallel()
	const lease = 300 * time.Millisecond
	release := make(chan struct{})
	started := make(chan struct{}, 2)
	var h *mwCounter
	h = &mwCounter{fn: func(w http.ResponseWriter, _ *http.Request, body []byte) {
		if h.runs.Load() > 1 {
			w.WriteHeader(http.StatusTeapot) // a second execution: the bug
			return
		}
		started <- struct{}{}
		<-release
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(http.StatusCreated)
		w.Write(append([]byte("done "), body...))
	}}
	srv := mwServe(t, idemhttp.Config{Store: mwMemStore(t), Lease: lease}, h)
	var once sync.Once
	unblock := func() { once.Do(func() { close(release) }) }
	t.Cleanup(unblock) // before the server's Close, which waits for the handler
	key := idemkey.NewV7()
	first := make(chan mwResp, 1)
	go func() { first <- mwDo(t, "POST", srv.URL+"/pay", key, []byte("x")) }()
	<-started

	// Poll well past several leases: every retry must find the key held.
	for deadline := time.Now().Add(5 * lease); time.Now().Before(deadline); time.Sleep(lease / 4) {
		r := mwDo(t, "POST", srv.URL+"/pay", key, []byte("x"))
		mwProblem(t, r, http.StatusConflict, "still being processed")
		if r.header.Get("Retry-After") == "" {
			t.Fatal("409 without Retry-After")
		}
	}
	unblock()
	r1 := <-first
	if r1.status != http.StatusCreated || string(r1.body) != "done x" {
		t.Fatalf("first request: %d %q", r1.status, r1.body)
	}
	r2 := mwDo(t, "POST", srv.URL+"/pay", key, []byte("x"))
	if r2.status != http.StatusCreated || !bytes.Equal(r2.body, r1.body) || r2.header.Get(idemhttp.HeaderReplayed) != "true" {
		t.Fatalf("retry after the first run: %d %q replayed=%q, want the replay", r2.status, r2.body, r2.header.Get(idemhttp.HeaderReplayed))
	}
	if n := h.runs.Load(); n != 1 {
		t.Fatalf("handler ran %d times, want 1", n)
	}
}
