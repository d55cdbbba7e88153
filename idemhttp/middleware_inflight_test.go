package idemhttp_test

import (
	"bytes"
	"io"
	"net/http"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemhq/idem/idemhttp"
	"github.com/idemhq/idem/idemkey"
	"github.com/idemhq/idem/internal/testsvc"
)

// Config.MaxInFlight bounds the memory of keyed requests: many concurrent large
// requests to a blocked handler get 503 beyond the cap, before their bodies are
// read, and the heap grows by at most the cap times the per-request bound.
//
// Not parallel: it measures the heap, which other tests would disturb.
func TestMiddlewareMaxInFlightBoundsMemory(t *testing.T) {
	const (
		clients  = 64
		cap      = 4
		maxBody  = 1 << 20
		perReq   = 3*maxBody + idemhttp.MaxStoredHeaderBytes + 128<<10 // request + response + record + overhead
		overhead = 16 << 20                                            // connections, goroutines, buffers of all clients
	)
	body := bytes.Repeat([]byte("x"), maxBody) // shared by every client: no copy per client
	release := make(chan struct{})
	var once sync.Once
	unblock := func() { once.Do(func() { close(release) }) }
	var started atomic.Int64
	h := &mwCounter{fn: func(w http.ResponseWriter, _ *http.Request, b []byte) {
		started.Add(1)
		<-release
		w.Write(b[:10])
	}}
	srv := mwServe(t, idemhttp.Config{Store: mwMemStore(t), MaxInFlight: cap, MaxBodyBytes: maxBody}, h)
	t.Cleanup(unblock)
	tr := &http.Transport{MaxIdleConnsPerHost: clients}
	t.Cleanup(tr.CloseIdleConnections)
	client := &http.Client{Transport: tr}

	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)

	var rejected, failed atomic.Int64
	var wg sync.WaitGroup
	for range clients {
		wg.Go(func() {
			req, _ := http.NewRequest("POST", srv.URL+"/upload", bytes.NewReader(body))
			req.Header.Set(idemhttp.HeaderKey, idemkey.NewV7())
			resp, err := client.Do(req)
			if err != nil {
				failed.Add(1) // the server may close the connection of a refused upload mid-write
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusServiceUnavailable && resp.Header.Get("Retry-After") != "" {
				rejected.Add(1)
			}
		})
	}
	testsvc.Eventually(t, time.Minute, "every client to be started, rejected or failed", func() bool { return started.Load()+rejected.Load()+failed.Load() == clients })
	runtime.GC()
	runtime.ReadMemStats(&after)
	growth := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	t.Logf("heap growth %.1f MiB with %d in flight (bound %.1f MiB); %d answered 503, %d cut",
		float64(growth)/(1<<20), cap, float64(cap*perReq+overhead)/(1<<20), rejected.Load(), failed.Load())
	if growth > cap*perReq+overhead {
		t.Errorf("heap grew by %d bytes, more than %d in flight × %d + %d", growth, cap, perReq, overhead)
	}
	if rejected.Load() == 0 {
		t.Errorf("no request was answered 503")
	}
	unblock()
	wg.Wait()
	if n := h.runs.Load(); n != cap {
		t.Errorf("handler ran %d times, want %d", n, cap)
	}
}
