//go:build unix

package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemhq/idem/admin"
	"github.com/idemhq/idem/cmd/idem/internal/cli"
	"github.com/idemhq/idem/internal/cdp"
	"github.com/idemhq/idem/internal/testsvc"
)

// fedDaemons starts a real relay (SQLite outbox → a webhook receiver) and a real
// gateway (SQLite store), feeds both until the test ends (a message enqueued and
// a keyed request, new then replayed, every few milliseconds), and returns their
// /metrics URLs and the gateway's store file.
func fedDaemons(t *testing.T) (relayMetrics, gatewayMetrics, gwStore string) {
	t.Helper()
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.Copy(io.Discard, r.Body) }))
	t.Cleanup(receiver.Close)
	path, _, enqueue := sqliteOutbox(t, "orders.created")
	r := startRelay(t, "--db", "sqlite:"+path, "--sink", receiver.URL+"/hooks", "--webhook-secret", strings.Repeat("k", 32), "--poll", "20ms")
	gwStore = filepath.Join(t.TempDir(), "gw.db")
	g := startGateway(t, keyedUpstream(t), "--store", "sqlite:"+gwStore)

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	var fed atomic.Int64
	go func() {
		defer close(done)
		for i := 0; ctx.Err() == nil; i++ {
			enqueue(fmt.Sprintf("m-%d", i))
			for range 2 { // the second is a replay
				req, _ := http.NewRequestWithContext(ctx, "POST", "http://"+g.addr+"/orders", strings.NewReader(`{}`))
				req.Header.Set("Idempotency-Key", fmt.Sprintf("order-%d", i))
				if resp, err := http.DefaultClient.Do(req); err == nil {
					resp.Body.Close()
				}
			}
			fed.Add(1)
			select {
			case <-ctx.Done():
			case <-time.After(30 * time.Millisecond):
			}
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	testsvc.Eventually(t, time.Minute, "traffic through both daemons", func() bool { return fed.Load() >= 3 })
	return "http://" + r.addr + "/metrics", "http://" + g.admin + "/metrics", gwStore
}

// metricsSummary GETs /api/metrics of an insecure idem admin.
func metricsSummary(t *testing.T, base string) admin.MetricsSummary {
	t.Helper()
	code, body := apiGet(t, base+"/api/metrics", "")
	var sum admin.MetricsSummary
	if err := json.Unmarshal([]byte(body), &sum); err != nil || code != 200 {
		t.Fatalf("/api/metrics: %d %s", code, body)
	}
	return sum
}

// idem admin --metrics-from reads a real relay's and a real gateway's /metrics:
// GET /api/metrics has their figures, each naming its source, and a source that
// is down is listed as down, not left out.
func TestAdminMetricsFrom(t *testing.T) {
	t.Parallel()
	relayURL, gwURL, gwStore := fedDaemons(t)
	const down = "http://127.0.0.1:1/metrics"
	_, addrs := startDaemon(t, adminListeningRE, "admin", "--listen", "127.0.0.1:0", "--insecure", "--store", "gw=sqlite:"+gwStore,
		"--metrics-from", relayURL, "--metrics-from", gwURL, "--metrics-from", down)
	base := "http://" + addrs[0]

	var sum admin.MetricsSummary
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("last GET /api/metrics: %+v", sum)
		}
	})
	testsvc.Eventually(t, time.Minute, "the relay's and the gateway's figures", func() bool {
		sum = metricsSummary(t, base)
		return sum.Metrics["idem_relay_published_total"].Value >= 3 && sum.Metrics["idem_http_requests_total"].Value >= 3 &&
			sum.Metrics["idem_http_requests_total"].ByOutcome["replayed"] >= 1
	})
	for name, from := range map[string]string{"idem_relay_published_total": relayURL, "idem_outbox_unpublished": relayURL,
		"idem_http_requests_total": gwURL} {
		if got := sum.Metrics[name].From; !slices.Equal(got, []string{from}) {
			t.Errorf("%s from %v, want [%s]", name, got, from)
		}
	}
	if len(sum.Sources) != 3 || !sum.Sources[0].Up || !sum.Sources[1].Up || sum.Sources[2].Up || sum.Sources[2].URL != down ||
		!strings.Contains(sum.Sources[2].Error, "refused") {
		t.Errorf("sources %+v", sum.Sources)
	}
	// Without --metrics-from, the figures are idem admin's own: none of theirs.
	_, addrs = startDaemon(t, adminListeningRE, "admin", "--listen", "127.0.0.1:0", "--insecure", "--store", "gw=sqlite:"+gwStore)
	sum = metricsSummary(t, "http://"+addrs[0])
	if _, ok := sum.Metrics["idem_relay_published_total"]; ok || sum.Sources == nil || len(sum.Sources) != 0 {
		t.Errorf("without --metrics-from: %+v", sum)
	}
}

// A bad --metrics-from is a usage error naming the flag, and never prints the
// password of a URL.
func TestAdminMetricsFromRefused(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "keys.db")
	for _, c := range []struct{ value, want string }{
		{"127.0.0.1:9464", "not an http:// or https:// URL"},
		{"ftp://scraper:s3cret-pass@127.0.0.1/metrics", "not an http:// or https:// URL"},
		{"http://scraper:s3cret-pass@127.0.0.1:9464/metrics", "credentials"},
	} {
		var stderr strings.Builder
		args := []string{"admin", "--insecure", "--store", "sqlite:" + path, "--metrics-from", c.value}
		err := (&Main{Stdout: io.Discard, Stderr: &stderr}).run(context.Background(), args)
		if !errors.Is(err, cli.ErrUsage) || !strings.Contains(stderr.String(), "-metrics-from") || !strings.Contains(stderr.String(), c.want) {
			t.Errorf("--metrics-from %s: %v, stderr %q, want a usage error with %q", c.value, err, stderr.String(), c.want)
		}
		if strings.Contains(stderr.String(), "s3cret-pass") {
			t.Errorf("the password was printed: %s", stderr.String())
		}
	}
}

// The console of idem admin --metrics-from, in headless Chromium: its charts show
// figures fed by a real relay and a real gateway, and an absent figure says which
// process exports it, how to add it, and which source is down.
func TestAdminConsoleChartsBrowser(t *testing.T) {
	t.Parallel()
	if _, err := os.Stat(cdp.ChromiumPath); err != nil {
		if os.Getenv("IDEM_REQUIRE_SERVICES") == "1" {
			t.Fatalf("IDEM_REQUIRE_SERVICES=1 but %s is missing (apt-get install chromium): %v", cdp.ChromiumPath, err)
		}
		t.Skipf("%s not installed: %v", cdp.ChromiumPath, err)
	}
	relayURL, gwURL, gwStore := fedDaemons(t)
	const down = "http://127.0.0.1:1/metrics"
	_, addrs := startDaemon(t, adminListeningRE, "admin", "--listen", "127.0.0.1:0", "--insecure", "--store", "gw=sqlite:"+gwStore,
		"--metrics-from", relayURL, "--metrics-from", gwURL, "--metrics-from", down)

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	page := cdp.Start(t).NewPage(ctx, t)
	if err := page.Call(ctx, "Emulation.setDeviceMetricsOverride", map[string]any{
		"width": 1360, "height": 900, "deviceScaleFactor": 1, "mobile": false}, nil); err != nil {
		t.Fatal(err)
	}
	if err := page.Call(ctx, "Page.navigate", map[string]any{"url": "http://" + addrs[0] + "/"}, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("browser console:\n%s", page.Logs())
		}
	})
	eval := func(js string) bool {
		var ok bool
		err := page.Eval(ctx, "!!(() => { try { return "+js+" } catch (e) { return false } })()", &ok)
		return err == nil && ok
	}
	wait := func(what, js string) {
		t.Helper()
		testsvc.Eventually(t, time.Minute, what, func() bool { return eval(js) })
	}
	wait("the console", `window.idemConsole.ready`)
	// Rates of the relay's and the gateway's counters, and the relay's gauges.
	wait("the charts fed by the relay and the gateway", `idemConsole.polls >= 3 && ['claims', 'replays', 'relay'].every(id => {
		const c = document.querySelector('[data-chart="' + id + '"]');
		return !c.classList.contains('absent') && c.querySelector('path.line').getAttribute('d').length > 0 &&
			Number.parseFloat(c.querySelector('.chart-value').textContent) > 0; }) &&
		['backlog', 'relaylag'].every(id => !document.querySelector('[data-chart="' + id + '"]').classList.contains('absent'))`)
	var foot, sources string
	if err := page.Eval(ctx, `document.querySelector('[data-chart="deadletters"] .chart-foot').textContent`, &foot); err != nil {
		t.Fatal(err)
	}
	if want := "no source exports idem_inbox_dead_letters_total: add --metrics-from with the /metrics of the service that runs the inbox; down: " +
		down + " ("; !strings.HasPrefix(foot, want) {
		t.Errorf("the absent dead letters chart says %q, want it to start with %q", foot, want)
	}
	if err := page.Eval(ctx, `Array.from(document.querySelectorAll('#metrics-sources li'), li => li.textContent).join('\n')`, &sources); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(sources, "source "+relayURL+": up") || !strings.Contains(sources, "source "+gwURL+": up") ||
		!strings.Contains(sources, "source "+down+": DOWN: ") {
		t.Errorf("the sources listed:\n%s", sources)
	}
	if !eval(`document.querySelector('[data-chart="relay"] .chart-foot').title === ` + jsQuote(t, "from "+relayURL)) {
		t.Error("the relay chart does not name its source")
	}
	// The gateway exports no store metrics: claims and replays are read from its
	// requests' outcomes, and the chart says so.
	if !eval(`document.querySelector('[data-chart="replays"] .chart-foot').textContent.endsWith(' · via the gateway') &&
		document.querySelector('[data-chart="replays"] .chart-foot').title === ` + jsQuote(t, "via idem_http_requests_total (replayed); from "+gwURL)) {
		t.Error("the replays chart does not say it reads the gateway's requests")
	}

	png, err := page.Screenshot(ctx)
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	dir := os.Getenv("IDEM_SCREENSHOT_DIR")
	if dir == "" {
		dir = t.TempDir()
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	shot := filepath.Join(dir, "admin-console-charts.png")
	if err := os.WriteFile(shot, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", shot)
}

func jsQuote(t *testing.T, s string) string {
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
