package testsvc

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// PostKeys sends n JSON POSTs to target from clients keep-alive clients, each with a
// new Idempotency-Key (run-1, run-2, …), and returns the time they took; it fails b
// on the first error or on a status other than 201. The gateway benchmarks
// (cmd/idem's BenchmarkServe, idemhttp/gateway's) load every variant with it.
func PostKeys(b *testing.B, target, run string, n, clients int) time.Duration {
	b.Helper()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: clients, DisableCompression: true}}
	defer client.CloseIdleConnections()
	var next atomic.Int64
	var failed atomic.Value
	var wg sync.WaitGroup
	start := time.Now()
	for range clients {
		wg.Go(func() {
			for i := next.Add(1); i <= int64(n); i = next.Add(1) {
				req, _ := http.NewRequest(http.MethodPost, target, strings.NewReader(`{"amount":5,"currency":"eur"}`))
				req.Header.Set("Idempotency-Key", fmt.Sprintf("%s-%d", run, i))
				req.Header.Set("Content-Type", "application/json")
				resp, err := client.Do(req)
				if err == nil {
					_, err = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if err == nil && resp.StatusCode != http.StatusCreated {
						err = fmt.Errorf("status %d", resp.StatusCode)
					}
				}
				if err != nil {
					failed.CompareAndSwap(nil, fmt.Errorf("POST %s: %w", target, err))
					return
				}
			}
		})
	}
	wg.Wait()
	d := time.Since(start)
	if err, _ := failed.Load().(error); err != nil {
		b.Fatal(err)
	}
	return d
}
