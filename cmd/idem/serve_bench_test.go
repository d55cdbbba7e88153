package main

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/idemhq/idem/idemhttp/gateway"
	"github.com/idemhq/idem/internal/testsvc"
)

// benchClients is the number of concurrent keep-alive clients of BenchmarkServe.
const benchClients = 8

// BenchmarkServe measures, in one run over loopback with 8 keep-alive clients sending
// POSTs with a new Idempotency-Key each, a plain httputil.ReverseProxy (with the
// gateway's transport and buffer pool, so the ratio is the cost of idempotency) beside
// `idem serve` on the memory and the SQLite store, in front of the same trivial
// upstream. The variants take turns in three rounds so that drift hits them alike.
// SQLite commits are durable, so its figure is reported beside the disk's fsync rate:
// group commit lets it exceed that rate. Each variant's CPU per request (the whole
// process's, clients and upstream included) says what a machine whose cores are the
// bound allows: sqlite/plain_cpu-bound.
//
//	go test -run '^$' -bench BenchmarkServe -benchtime 30000x ./cmd/idem
func BenchmarkServe(b *testing.B) {
	up, plain := testsvc.ProxyBaseline(b, gateway.UpstreamTransport(time.Minute), gateway.BufferPool)
	dir := b.TempDir()
	mem := startGateway(b, up.URL, "--store", "memory:")
	sqlite := startGateway(b, up.URL, "--store", "sqlite:"+filepath.Join(dir, "gateway.db"))

	targets := []testsvc.Target{
		{Name: "plain", URL: plain.URL}, {Name: "memory", URL: "http://" + mem.addr}, {Name: "sqlite", URL: "http://" + sqlite.addr},
	}
	loads := testsvc.LoadInTurns(b, benchClients, targets...)
	rate := make([]float64, len(targets))
	perReq := make([]float64, len(targets))
	for i, tgt := range targets {
		rate[i] = loads[i].Rate()
		perReq[i] = loads[i].CPUPerRequest()
		b.ReportMetric(rate[i], tgt.Name+"_req/s")
		if perReq[i] > 0 {
			b.ReportMetric(perReq[i], tgt.Name+"_cpu-µs/req")
		}
	}
	b.ReportMetric(rate[1]/rate[0], "memory/plain")
	b.ReportMetric(rate[2]/rate[0], "sqlite/plain")
	// The ratio a machine whose cores are the bound allows: the plain proxy's CPU per
	// request over the SQLite gateway's (clients and upstream included in both).
	if perReq[2] > 0 {
		b.ReportMetric(perReq[0]/perReq[2], "sqlite/plain_cpu-bound")
	}
	b.ReportMetric(fsyncRate(b, dir), "fsyncs/s")
}

// fsyncRate measures how many 4 KiB write+fsync pairs per second the disk under dir
// completes, one at a time: the bound of one-commit-per-fsync durability.
func fsyncRate(b *testing.B, dir string) float64 {
	b.Helper()
	f, err := os.CreateTemp(dir, "fsync-")
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	page := make([]byte, 4096)
	n, start := 0, time.Now()
	for ; n < 2000 && time.Since(start) < time.Second; n++ {
		if _, err := f.WriteAt(page, int64(n%64)*4096); err != nil {
			b.Fatal(err)
		}
		if err := f.Sync(); err != nil {
			b.Fatal(err)
		}
	}
	return float64(n) / time.Since(start).Seconds()
}

// runningGateway is `idem serve` running in a goroutine, for the tests and BenchmarkServe.
type runningGateway struct {
	*daemon
	addr, admin string
}

var serveListeningRE = regexp.MustCompile(`idem serve: listening on (\S+) \(admin (\S+)\)`)

// startGateway runs `idem serve --upstream URL --listen 127.0.0.1:0 --admin-listen
// 127.0.0.1:0 args…` and returns once it serves.
func startGateway(t testing.TB, upstreamURL string, args ...string) *runningGateway {
	t.Helper()
	d, addrs := startDaemon(t, serveListeningRE, append([]string{"serve", "--upstream", upstreamURL,
		"--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0"}, args...)...)
	return &runningGateway{daemon: d, addr: addrs[0], admin: addrs[1]}
}
