package admin_test

import (
	"context"
	"fmt"
	"math"
	"testing"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/admin"
	"github.com/idemhq/idem/idemmem"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// TestMetricsSummary sums a real store's idem_* metrics over their labels, with
// the outcome breakdown, and leaves out other families and non-finite series.
func TestMetricsSummary(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	store, err := idemmem.New(idemmem.Config{Registerer: b.reg})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	// Two scopes (two series per outcome): 3 keys acquired and completed, then each
	// claimed again (3 replays, 3 duplicates), and one held key claimed twice more.
	for i := range 3 {
		k := idem.Key{Scope: fmt.Sprintf("s%d", i%2), ID: fmt.Sprint(i)}
		res, err := store.Claim(ctx, idem.Claim{Key: k})
		if err != nil || res.Outcome != idem.Acquired {
			t.Fatalf("claim %v: %+v %v", k, res, err)
		}
		if err := store.Complete(ctx, k, res.Token, []byte("ok")); err != nil {
			t.Fatal(err)
		}
		if res, err := store.Claim(ctx, idem.Claim{Key: k}); err != nil || res.Outcome != idem.Replayed {
			t.Fatalf("claim again %v: %+v %v", k, res, err)
		}
	}
	held := idem.Key{Scope: "s0", ID: "held"}
	if _, err := store.Claim(ctx, idem.Claim{Key: held}); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if res, err := store.Claim(ctx, idem.Claim{Key: held}); err != nil || res.Outcome != idem.InProgress {
			t.Fatalf("claim held: %+v %v", res, err)
		}
	}
	// Families the summary must leave out, or skip series of.
	nan := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "idem_test_gauge"}, []string{"x"})
	nan.WithLabelValues("a").Set(2)
	nan.WithLabelValues("b").Set(math.NaN())
	lag := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "idem_test_lag_seconds"})
	lag.Observe(1)
	lag.Observe(3)
	b.reg.MustRegister(nan, lag, prometheus.NewCounter(prometheus.CounterOpts{Name: "other_total"}))

	b.do(t, "GET", "/api/", readToken, "")
	var sum admin.MetricsSummary
	wantJSON(t, b.do(t, "GET", "/api/metrics", readToken, ""), &sum)
	if sum.Time.IsZero() {
		t.Error("time is zero")
	}
	want := map[string]admin.MetricSummary{
		"idem_claims_total": {Type: "counter", Value: 9,
			ByOutcome: map[string]float64{"acquired": 4, "replayed": 3, "in_progress": 2}},
		"idem_duplicates_total": {Type: "counter", Value: 5},
		"idem_records":          {Type: "gauge", Value: 4},
		"idem_test_gauge":       {Type: "gauge", Value: 2},
		"idem_test_lag_seconds": {Type: "histogram", Value: 2, Sum: 4},
	}
	for name, w := range want {
		got, ok := sum.Metrics[name]
		if !ok {
			t.Errorf("%s missing from %v", name, sum.Metrics)
			continue
		}
		if got.Type != w.Type || got.Value != w.Value || got.Sum != w.Sum || fmt.Sprint(got.ByOutcome) != fmt.Sprint(w.ByOutcome) {
			t.Errorf("%s = %+v, want %+v", name, got, w)
		}
	}
	if _, ok := sum.Metrics["other_total"]; ok {
		t.Error("a family without the idem_ prefix is listed")
	}
	// The admin API's own counter is idem's too: it counted the request before.
	if got := sum.Metrics["idem_admin_requests_total"]; got.Type != "counter" || got.Value != 1 {
		t.Errorf("idem_admin_requests_total = %+v", got)
	}
}

// TestMetricsSummaryBounds: outcomes past MaxMetricOutcomes are added up as
// "other", a Gatherer's error is a logged 500, and no Gatherer is not configured.
func TestMetricsSummaryBounds(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "idem_test_total"}, []string{"outcome"})
	for i := range admin.MaxMetricOutcomes + 10 {
		c.WithLabelValues(fmt.Sprintf("o%02d", i)).Inc()
	}
	b.reg.MustRegister(c)
	var sum admin.MetricsSummary
	wantJSON(t, b.do(t, "GET", "/api/metrics", readToken, ""), &sum)
	got := sum.Metrics["idem_test_total"]
	total := 0.0
	for _, v := range got.ByOutcome {
		total += v
	}
	if got.Value != admin.MaxMetricOutcomes+10 || len(got.ByOutcome) != admin.MaxMetricOutcomes || total != got.Value || got.ByOutcome["other"] < 10 {
		t.Errorf("summary %+v", got)
	}

	failing := setup(t, func(c *admin.Config) { c.Gatherer = failingGatherer{} })
	wantProblem(t, failing.do(t, "GET", "/api/metrics", readToken, ""), 500, admin.ProblemInternal)

	none := setup(t, func(c *admin.Config) { c.Gatherer = nil })
	wantProblem(t, none.do(t, "GET", "/api/metrics", readToken, ""), 404, admin.ProblemNotConfigured, "metrics")
	wantProblem(t, none.do(t, "GET", "/api/metrics", "", ""), 401, admin.ProblemUnauthorized)
}

type failingGatherer struct{}

func (failingGatherer) Gather() ([]*dto.MetricFamily, error) {
	return nil, fmt.Errorf("collector exploded")
}
