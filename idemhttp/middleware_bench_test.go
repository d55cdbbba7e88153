package idemhttp_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemhq/idem/idemhttp"
	"github.com/idemhq/idem/idemmem"
	"github.com/idemhq/idem/internal/testsvc"
)

// mwBenchClients is the number of concurrent keep-alive clients of the benchmarks.
const mwBenchClients = 8

// mwBenchHandler is a small JSON API endpoint: it decodes an order and answers 201
// with the created order, the work of a typical POST handler minus its database.
func mwBenchHandler() http.Handler {
	var ids atomic.Int64
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var in struct {
			SKU string `json:"sku"`
			Qty int    `json:"qty"`
		}
		if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Location", "/orders/"+strconv.FormatInt(ids.Add(1), 10))
		w.WriteHeader(http.StatusCreated)
		json.NewEncoder(w).Encode(struct {
			ID     int64  `json:"id"`
			SKU    string `json:"sku"`
			Qty    int    `json:"qty"`
			Status string `json:"status"`
		}{ids.Load(), in.SKU, in.Qty, "created"})
	})
}

// mwBenchTarget is one benchmarked server: the bare handler ("bare") or the
// middleware on the memory store ("new-key", "replay"), with its keep-alive client.
type mwBenchTarget struct {
	mode string
	srv  *httptest.Server
	tr   *http.Transport
	seq  atomic.Int64
}

var mwBenchBody = []byte(`{"sku":"tea-earl-grey-250g","qty":3}`)

func newMWBenchTarget(b *testing.B, mode string) *mwBenchTarget {
	h := mwBenchHandler()
	if mode != "bare" {
		store, err := idemmem.New(idemmem.Config{})
		if err != nil {
			b.Fatal(err)
		}
		cfg := idemhttp.Config{Store: store}
		if mode == "new-key-traced" {
			cfg.TracerProvider = testsvc.SDKTracing(b)
		}
		mw, err := idemhttp.Middleware(cfg)
		if err != nil {
			b.Fatal(err)
		}
		h = mw(h)
	}
	t := &mwBenchTarget{mode: mode, srv: httptest.NewServer(h),
		tr: &http.Transport{MaxIdleConnsPerHost: mwBenchClients, MaxConnsPerHost: mwBenchClients}}
	b.Cleanup(func() { t.tr.CloseIdleConnections(); t.srv.Close() })
	t.send(b, []byte("replayed-key")) // the key replay mode replays
	return t
}

// send posts one order. Every mode sends an Idempotency-Key (new per request, or
// the replayed one), so the clients do the same work in every mode and the
// difference is the middleware's.
func (t *mwBenchTarget) send(b *testing.B, key []byte) {
	if t.mode != "replay" {
		key = strconv.AppendInt(append(key[:0], "order-"...), t.seq.Add(1), 10)
	}
	req, _ := http.NewRequest("POST", t.srv.URL+"/orders", bytes.NewReader(mwBenchBody))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(idemhttp.HeaderKey, string(key))
	resp, err := t.tr.RoundTrip(req)
	if err != nil {
		b.Error(err)
		return
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		b.Errorf("%s: status %d", t.mode, resp.StatusCode)
	}
}

// run sends n requests from mwBenchClients goroutines.
func (t *mwBenchTarget) run(b *testing.B, n int) {
	var left atomic.Int64
	left.Store(int64(n))
	var wg sync.WaitGroup
	for range mwBenchClients {
		wg.Go(func() {
			key := []byte("replayed-key")
			for left.Add(-1) >= 0 {
				t.send(b, key)
			}
		})
	}
	wg.Wait()
}

var mwBenchModes = []string{"bare", "new-key", "replay"}

// BenchmarkMiddleware measures each mode alone with RunParallel (8 keep-alive
// clients over loopback): use it for profiles and allocations. For the ratios
// between modes use BenchmarkMiddlewareInterleaved, which is robust to a machine
// whose load changes during the run.
func BenchmarkMiddleware(b *testing.B) {
	for _, mode := range mwBenchModes {
		b.Run(mode, func(b *testing.B) { benchMode(b, mode) })
	}
}

// benchMode serves b.N requests of mode (newMWBenchTarget) from mwBenchClients
// keep-alive clients with RunParallel and reports their rate.
func benchMode(b *testing.B, mode string) {
	t := newMWBenchTarget(b, mode)
	procs := runtime.GOMAXPROCS(0)
	b.SetParallelism(max(1, (mwBenchClients+procs-1)/procs))
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		key := []byte("replayed-key")
		for pb.Next() {
			t.send(b, key)
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "req/s")
}

// BenchmarkMiddlewareInterleaved runs the three modes in alternation: each
// iteration is a round in which every mode serves mwBenchRound requests from 8
// clients, the mode going first rotating from round to round. A round lasts a
// fraction of a second, so its three modes see the same load on the machine; the
// ratios reported (new-key/bare, replay/bare) are the medians of the rounds' ratios,
// which a burst of load elsewhere does not skew. req/s per mode are over all rounds.
// Run it with -benchtime=Nx for N rounds.
func BenchmarkMiddlewareInterleaved(b *testing.B) {
	const mwBenchRound = 1000
	targets := make([]*mwBenchTarget, len(mwBenchModes))
	for i, mode := range mwBenchModes {
		targets[i] = newMWBenchTarget(b, mode)
		targets[i].run(b, 200) // warm up the connections
	}
	total := make([]time.Duration, len(targets))
	ratios := make([][]float64, len(targets)) // per mode, per round: bare time / mode time
	b.ResetTimer()
	for round := range b.N {
		spent := make([]time.Duration, len(targets))
		for j := range targets {
			i := (round + j) % len(targets)
			start := time.Now()
			targets[i].run(b, mwBenchRound)
			spent[i] = time.Since(start)
			total[i] += spent[i]
		}
		for i := range targets {
			ratios[i] = append(ratios[i], spent[0].Seconds()/spent[i].Seconds())
		}
	}
	for i, mode := range mwBenchModes {
		b.ReportMetric(float64(b.N*mwBenchRound)/total[i].Seconds(), mode+"-req/s")
		if i > 0 {
			slices.Sort(ratios[i])
			b.ReportMetric(ratios[i][len(ratios[i])/2], mode+"/bare")
		}
	}
}
