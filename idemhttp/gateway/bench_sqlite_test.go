package gateway_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"path/filepath"
	"testing"
	"time"

	"github.com/idemhq/idem/idemhttp/gateway"
	"github.com/idemhq/idem/idemsqlite"
	"github.com/idemhq/idem/internal/testsvc"
)

// BenchmarkGatewaySQLiteCost counts what a request through the gateway on the
// durable SQLite store costs, beside a plain httputil.ReverseProxy in the same run
// (8 keep-alive clients, a new key per POST, the variants taking turns in three
// rounds): the store's commits per request and calls per commit (its group
// commit), and the process's CPU per request, clients and upstream included. On a
// machine whose cores are the bound, plain_cpu/sqlite_cpu is the ratio of
// throughputs it allows; cmd/idem's BenchmarkServe measures the throughputs.
//
//	go test -run '^$' -bench GatewaySQLiteCost -benchtime 20000x ./idemhttp/gateway
func BenchmarkGatewaySQLiteCost(b *testing.B) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, `{"id":"ord_1","status":"created"}`)
	}))
	b.Cleanup(up.Close)
	upURL, _ := url.Parse(up.URL)
	plain := httptest.NewServer(&httputil.ReverseProxy{
		Rewrite:    func(pr *httputil.ProxyRequest) { pr.SetURL(upURL); pr.SetXForwarded() },
		Transport:  gateway.UpstreamTransport(time.Minute),
		BufferPool: gateway.BufferPool,
	})
	b.Cleanup(plain.Close)
	st, err := idemsqlite.Open(context.Background(), filepath.Join(b.TempDir(), "gateway.db"), idemsqlite.Config{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = st.Close() })
	g, err := gateway.New(gateway.Config{Upstream: upURL, Store: st})
	if err != nil {
		b.Fatal(err)
	}
	sqlite := httptest.NewServer(g)
	b.Cleanup(sqlite.Close)

	const rounds = 3
	urls := []string{plain.URL, sqlite.URL}
	var elapsed, cpu [2]time.Duration
	var done [2]int
	before := st.Stats()
	b.ResetTimer()
	for round := range rounds {
		for i, u := range urls {
			n := b.N / rounds
			if round == rounds-1 {
				n = b.N - 2*(b.N/rounds)
			}
			c0 := testsvc.ProcessCPU(b)
			elapsed[i] += testsvc.PostKeys(b, u+"/orders", fmt.Sprintf("%d-%d", i, round), n, 8)
			cpu[i] += testsvc.ProcessCPU(b) - c0
			done[i] += n
		}
	}
	b.StopTimer()
	after := st.Stats()
	commits, ops := after.Commits-before.Commits, after.Ops-before.Ops
	perReq := func(i int) float64 { return float64(cpu[i].Nanoseconds()) / 1e3 / float64(done[i]) }
	b.ReportMetric(float64(done[0])/elapsed[0].Seconds(), "plain_req/s")
	b.ReportMetric(float64(done[1])/elapsed[1].Seconds(), "sqlite_req/s")
	b.ReportMetric(perReq(0), "plain_cpu-µs/req")
	b.ReportMetric(perReq(1), "sqlite_cpu-µs/req")
	b.ReportMetric(perReq(0)/perReq(1), "plain_cpu/sqlite_cpu")
	b.ReportMetric(float64(commits)/float64(done[1]), "commits/req")
	b.ReportMetric(float64(ops)/float64(max(commits, 1)), "calls/commit")
}
