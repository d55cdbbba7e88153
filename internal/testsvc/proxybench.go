package testsvc

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"testing"
	"time"
)

// ProxyBaseline starts the gateway benchmarks' trivial upstream, which reads the
// body and answers 201 with a small JSON order, and in front of it a plain
// httputil.ReverseProxy on transport and pool: the baseline a benchmark prints
// beside the gateway. Callers pass the gateway's own transport and buffer pool
// (testsvc does not import the gateway), so the gap is the cost of idempotency.
// Both servers close when b ends.
func ProxyBaseline(b *testing.B, transport http.RoundTripper, pool httputil.BufferPool) (upstream, plain *httptest.Server) {
	b.Helper()
	upstream = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, `{"id":"ord_1","status":"created"}`)
	}))
	b.Cleanup(upstream.Close)
	upURL, err := url.Parse(upstream.URL)
	if err != nil {
		b.Fatal(err)
	}
	plain = httptest.NewServer(&httputil.ReverseProxy{
		Rewrite:    func(pr *httputil.ProxyRequest) { pr.SetURL(upURL); pr.SetXForwarded() },
		Transport:  transport,
		BufferPool: pool,
	})
	b.Cleanup(plain.Close)
	return upstream, plain
}

// Target is one variant a gateway benchmark loads: the name its keys and figures
// carry, and the base URL its POSTs go to (path /orders).
type Target struct{ Name, URL string }

// Load is what one Target's share of a benchmark's POSTs took.
type Load struct {
	Requests     int
	Elapsed, CPU time.Duration // the POSTs' wall time; the whole process's CPU meanwhile
}

// Rate is the requests per second.
func (l Load) Rate() float64 { return float64(l.Requests) / l.Elapsed.Seconds() }

// CPUPerRequest is the process's CPU per request in µs, clients and upstream
// included; zero where ProcessCPU is.
func (l Load) CPUPerRequest() float64 {
	return float64(l.CPU.Nanoseconds()) / 1e3 / float64(l.Requests)
}

// LoadInTurns sends b.N POSTs with new keys to each of targets (PostKeys, from
// clients keep-alive clients), the targets taking turns in three rounds so that
// drift hits them alike, and returns each one's Load in the order given. The
// benchmark's timer runs only meanwhile.
func LoadInTurns(b *testing.B, clients int, targets ...Target) []Load {
	b.Helper()
	const rounds = 3
	loads := make([]Load, len(targets))
	b.ResetTimer()
	for round := range rounds {
		for i, tgt := range targets {
			n := b.N / rounds
			if round == rounds-1 {
				n = b.N - 2*(b.N/rounds)
			}
			before := ProcessCPU(b)
			loads[i].Elapsed += PostKeys(b, tgt.URL+"/orders", fmt.Sprintf("%s-%d", tgt.Name, round), n, clients)
			loads[i].CPU += ProcessCPU(b) - before
			loads[i].Requests += n
		}
	}
	b.StopTimer()
	return loads
}
