package gateway_test

import (
	"context"
	"net/http/httptest"
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
	up, plain := testsvc.ProxyBaseline(b, gateway.UpstreamTransport(time.Minute), gateway.BufferPool)
	upURL, _ := url.Parse(up.URL)
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

	before := st.Stats()
	loads := testsvc.LoadInTurns(b, 8, testsvc.Target{Name: "plain", URL: plain.URL}, testsvc.Target{Name: "sqlite", URL: sqlite.URL})
	after := st.Stats()
	commits, ops := after.Commits-before.Commits, after.Ops-before.Ops
	b.ReportMetric(loads[0].Rate(), "plain_req/s")
	b.ReportMetric(loads[1].Rate(), "sqlite_req/s")
	b.ReportMetric(loads[0].CPUPerRequest(), "plain_cpu-µs/req")
	b.ReportMetric(loads[1].CPUPerRequest(), "sqlite_cpu-µs/req")
	b.ReportMetric(loads[0].CPUPerRequest()/loads[1].CPUPerRequest(), "plain_cpu/sqlite_cpu")
	b.ReportMetric(float64(commits)/float64(loads[1].Requests), "commits/req")
	b.ReportMetric(float64(ops)/float64(max(commits, 1)), "calls/commit")
}
