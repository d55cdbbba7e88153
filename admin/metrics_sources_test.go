package admin_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/admin"
	"github.com/idemhq/idem/idemmem"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// metricsServer serves reg's /metrics as a daemon does (promhttp), counting the
// reads.
func metricsServer(t *testing.T, reg *prometheus.Registry, reads *atomic.Int64) string {
	t.Helper()
	h := promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reads.Add(1)
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(s.Close)
	return s.URL + "/metrics"
}

// claims makes n claims acquired and completed on a store registered with reg.
func claims(t *testing.T, reg *prometheus.Registry, n int) {
	t.Helper()
	store, err := idemmem.New(idemmem.Config{Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		k := idem.Key{Scope: "s", ID: string(rune('a' + i))}
		res, err := store.Claim(context.Background(), idem.Claim{Key: k})
		if err != nil || res.Outcome != idem.Acquired {
			t.Fatalf("claim: %+v %v", res, err)
		}
		if err := store.Complete(context.Background(), k, res.Token, []byte("ok")); err != nil {
			t.Fatal(err)
		}
	}
}

// GET /api/metrics adds up the counters of the Config.Metrics sources (two real
// stores' registries served over HTTP) with the local Gatherer's, says where each
// figure comes from, and lists a source that is down (refused, oversized, not the
// text format, too slow) with why, instead of a silent zero.
func TestMetricsSources(t *testing.T) {
	t.Parallel()
	var readsA, readsB, other atomic.Int64
	regA, regB, local := prometheus.NewRegistry(), prometheus.NewRegistry(), prometheus.NewRegistry()
	claims(t, regA, 2)
	claims(t, regB, 3)
	claims(t, local, 1)
	a, b := metricsServer(t, regA, &readsA), metricsServer(t, regB, &readsB)

	down := httptest.NewServer(http.NotFoundHandler())
	downURL := down.URL + "/metrics"
	down.Close() // refuses connections
	huge := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		other.Add(1)
		w.Write([]byte("# TYPE idem_x_total counter\nidem_x_total 1\n" + strings.Repeat("# padding\n", 8000)))
	}))
	t.Cleanup(huge.Close)
	html := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("<html><script>alert(1)</script></html>"))
	}))
	t.Cleanup(html.Close)
	release := make(chan struct{})
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select { // answers only once the test is over
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(slow.Close)
	t.Cleanup(func() { close(release) })

	bn := setup(t, func(c *admin.Config) {
		c.Gatherer = local
		c.Metrics = &admin.MetricsSources{URLs: []string{a, b, downURL, huge.URL, html.URL, slow.URL},
			Timeout: 3 * time.Second, MaxBytes: 64 << 10, Every: time.Hour}
	})
	var sum admin.MetricsSummary
	wantJSON(t, bn.do(t, "GET", "/api/metrics", readToken, ""), &sum)

	claimsTotal := sum.Metrics["idem_claims_total"]
	if claimsTotal.Value != 6 || claimsTotal.ByOutcome["acquired"] != 6 || !slices.Equal(claimsTotal.From, []string{"local", a, b}) {
		t.Errorf("idem_claims_total = %+v, want 6 from local, %s and %s", claimsTotal, a, b)
	}
	if _, ok := sum.Metrics["idem_x_total"]; ok {
		t.Error("the oversized source's metric was counted")
	}
	if len(sum.Sources) != 6 {
		t.Fatalf("sources %+v", sum.Sources)
	}
	for i, want := range []struct {
		up  bool
		err string
	}{{true, ""}, {true, ""}, {false, "refused"}, {false, "larger than 65536 bytes"}, {false, "not the Prometheus text format"}, {false, "no answer within 3s"}} {
		s := sum.Sources[i]
		if s.Up != want.up || !strings.Contains(s.Error, want.err) || (s.Up && s.Families == 0) {
			t.Errorf("source %d = %+v, want up %v, error with %q", i, s, want.up, want.err)
		}
	}

	// Within Every, polls reuse the reading: the sources are read once.
	claims(t, regA, 1)
	wantJSON(t, bn.do(t, "GET", "/api/metrics", readToken, ""), &sum)
	if readsA.Load() != 1 || readsB.Load() != 1 || other.Load() != 1 {
		t.Errorf("read %d, %d, %d times, want once each", readsA.Load(), readsB.Load(), other.Load())
	}
	if sum.Metrics["idem_claims_total"].Value != 6 {
		t.Errorf("a cached reading gave %v", sum.Metrics["idem_claims_total"].Value)
	}
}

// After Every, the sources are read again: a counter's growth shows.
func TestMetricsSourcesReadAgain(t *testing.T) {
	t.Parallel()
	var reads atomic.Int64
	reg := prometheus.NewRegistry()
	claims(t, reg, 1)
	u := metricsServer(t, reg, &reads)
	bn := setup(t, func(c *admin.Config) {
		c.Gatherer = nil
		c.Metrics = &admin.MetricsSources{URLs: []string{u}, Every: time.Nanosecond}
	})
	var sum admin.MetricsSummary
	wantJSON(t, bn.do(t, "GET", "/api/metrics", readToken, ""), &sum)
	if sum.Metrics["idem_claims_total"].Value != 1 {
		t.Fatalf("first reading %+v", sum.Metrics["idem_claims_total"])
	}
	claims(t, reg, 2)
	wantJSON(t, bn.do(t, "GET", "/api/metrics", readToken, ""), &sum)
	if got := sum.Metrics["idem_claims_total"]; got.Value != 3 || !slices.Equal(got.From, []string{u}) || reads.Load() != 2 {
		t.Fatalf("second reading %+v after %d reads", got, reads.Load())
	}
}

// Bad sources are refused by New, naming the field and the fix.
func TestMetricsSourcesChecked(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		m    admin.MetricsSources
		want string
	}{
		{admin.MetricsSources{URLs: []string{"127.0.0.1:9464"}}, "not an http:// or https:// URL"},
		{admin.MetricsSources{URLs: []string{"file:///etc/passwd"}}, "not an http:// or https:// URL"},
		{admin.MetricsSources{URLs: []string{"http://user:s3cret@127.0.0.1:9464/metrics"}}, "credentials"},
		{admin.MetricsSources{URLs: make([]string, admin.MaxMetricsSources+1)}, "more than 32"},
		{admin.MetricsSources{Timeout: -1}, "Timeout"},
		{admin.MetricsSources{MaxBytes: -1}, "MaxBytes"},
		{admin.MetricsSources{Every: -1}, "Every"},
	} {
		_, err := admin.New(admin.Config{Token: fullToken, Metrics: &c.m})
		var ie *idem.InputError
		if !errors.As(err, &ie) || !strings.Contains(ie.Error(), c.want) || strings.Contains(ie.Error(), "s3cret") {
			t.Errorf("%+v: %v, want an InputError with %q", c.m, err, c.want)
		}
	}
}
