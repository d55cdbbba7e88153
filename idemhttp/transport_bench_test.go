package idemhttp_test

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemhq/idem/idemhttp"
)

// BenchmarkTransport compares Transport with a plain http.Transport (a clone of
// http.DefaultTransport with 64 idle connections per host, for both), POSTing to a
// loopback server that answers 200, from 8 goroutines (or GOMAXPROCS if more). Each
// goroutine alternates between the two clients, so both see the same machine load,
// and the time of each request is added to its client's total; it reports each
// client's requests per second and their ratio ("x_plain"). The "cpu" case measures
// Transport alone, on a Base that answers at once.
func BenchmarkTransport(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		_, _ = io.WriteString(w, `{"id":1}`)
	}))
	defer srv.Close()
	payload := []byte(`{"amount":4200,"currency":"eur"}`)
	b.Run("loopback", func(b *testing.B) {
		bases := [2]*http.Transport{}
		for i := range bases {
			bases[i] = http.DefaultTransport.(*http.Transport).Clone()
			bases[i].MaxIdleConnsPerHost = 64 // 8 goroutines must not churn connections
			defer bases[i].CloseIdleConnections()
		}
		clients := [2]*http.Client{{Transport: bases[0]}, {Transport: &idemhttp.Transport{Base: bases[1]}}}
		var nanos, counts [2]atomic.Int64
		var goroutines atomic.Int64
		b.SetParallelism(max(1, 8/runtime.GOMAXPROCS(0)))
		b.RunParallel(func(pb *testing.PB) {
			goroutines.Add(1)
			for i := 0; pb.Next(); i++ {
				start := time.Now()
				req, _ := http.NewRequest(http.MethodPost, srv.URL+"/charges", bytes.NewReader(payload))
				resp, err := clients[i&1].Do(req)
				if err != nil {
					b.Error(err)
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
				nanos[i&1].Add(int64(time.Since(start)))
				counts[i&1].Add(1)
			}
		})
		var rate [2]float64
		for i := range rate {
			if busy := time.Duration(nanos[i].Load()).Seconds() / float64(goroutines.Load()); busy > 0 {
				rate[i] = float64(counts[i].Load()) / busy
			}
		}
		b.ReportMetric(rate[0], "plain_req/s")
		b.ReportMetric(rate[1], "transport_req/s")
		if rate[0] > 0 {
			b.ReportMetric(rate[1]/rate[0], "x_plain")
		}
	})
	b.Run("cpu", func(b *testing.B) {
		tr := &idemhttp.Transport{Base: trRoundTripper(func(r *http.Request) (*http.Response, error) {
			return &http.Response{StatusCode: 200, Header: http.Header{}, Body: http.NoBody, Request: r}, nil
		})}
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				req, _ := http.NewRequest(http.MethodPost, "http://api.test/charges", bytes.NewReader(payload))
				if _, err := tr.RoundTrip(req); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}
