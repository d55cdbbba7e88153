package idemtest

import (
	"context"
	"testing"

	"github.com/idemhq/idem"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
)

// MetricValue returns the value of the series of family name whose labels include
// labels: a counter's or gauge's value, a histogram's sample count. It fails t if
// there is no such series.
func MetricValue(t testing.TB, g prometheus.Gatherer, name string, labels map[string]string) float64 {
	t.Helper()
	var v float64
	found := false
	eachSeries(t, g, name, labels, func(m *dto.Metric) bool {
		switch {
		case m.Counter != nil:
			v = m.GetCounter().GetValue()
		case m.Gauge != nil:
			v = m.GetGauge().GetValue()
		case m.Histogram != nil:
			v = float64(m.GetHistogram().GetSampleCount())
		default:
			return true
		}
		found = true
		return false
	})
	if !found {
		t.Fatalf("no series %s%v", name, labels)
	}
	return v
}

// MetricSum returns the sum of the counters and gauges of family name whose
// labels include labels (all of its series for none): 0 where there is none, as
// for a counter never incremented.
func MetricSum(t testing.TB, g prometheus.Gatherer, name string, labels map[string]string) float64 {
	t.Helper()
	var sum float64
	eachSeries(t, g, name, labels, func(m *dto.Metric) bool {
		sum += m.GetCounter().GetValue() + m.GetGauge().GetValue()
		return true
	})
	return sum
}

// eachSeries calls fn with each series of family name whose labels include
// labels, until fn returns false.
func eachSeries(t testing.TB, g prometheus.Gatherer, name string, labels map[string]string, fn func(*dto.Metric) bool) {
	t.Helper()
	families, err := g.Gather()
	if err != nil {
		t.Fatalf("gather metrics: %v", err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	series:
		for _, m := range f.GetMetric() {
			have := map[string]string{}
			for _, lp := range m.GetLabel() {
				have[lp.GetName()] = lp.GetValue()
			}
			for k, v := range labels {
				if have[k] != v {
					continue series
				}
			}
			if !fn(m) {
				return
			}
		}
	}
}

// MetricsSuite checks that a store reports its claims as docs/observability.md names them:
// idem_claims_total by outcome, idem_duplicates_total, and the claim latency
// histogram; a BatchClaimer counts the claims of a batch one by one. newStore
// returns a fresh store of backend registering on reg.
func MetricsSuite(t *testing.T, backend string, newStore func(t *testing.T, reg prometheus.Registerer) idem.Store) {
	t.Helper()
	t.Run("Metrics", func(t *testing.T) {
		t.Parallel()
		reg := prometheus.NewRegistry()
		s := newStore(t, reg)
		ctx := context.Background()
		k := idem.Key{Scope: "metrics-suite", ID: "k"}
		first := MustClaim(t, s, idem.Claim{Key: k})                               // acquired
		MustClaim(t, s, idem.Claim{Key: k})                                        // in_progress
		MustClaim(t, s, idem.Claim{Key: k, Fingerprint: []byte("another intent")}) // mismatch
		if err := s.Complete(ctx, k, first.Token, []byte("r")); err != nil {
			t.Fatal(err)
		}
		MustClaim(t, s, idem.Claim{Key: k}) // replayed
		// Bad input is refused before it is a claim: it is not counted.
		if _, err := s.Claim(ctx, idem.Claim{Key: idem.Key{Scope: "metrics-suite"}}); err == nil {
			t.Fatal("a claim without an ID succeeded")
		}

		if got := MetricValue(t, reg, "idem_claim_duration_seconds", map[string]string{"backend": backend}); got != 4 {
			t.Errorf("idem_claim_duration_seconds has %v samples, want 4", got)
		}

		want := map[string]float64{"acquired": 1, "in_progress": 1, "mismatch": 1, "replayed": 1}
		if b, ok := s.(idem.BatchClaimer); ok {
			if _, err := b.ClaimBatch(ctx, []idem.Claim{
				{Key: k}, {Key: k, Fingerprint: []byte("another intent")}, {Key: idem.Key{Scope: "metrics-suite", ID: "fresh"}},
			}); err != nil {
				t.Fatalf("ClaimBatch: %v", err)
			}
			want["replayed"]++
			want["mismatch"]++
			want["acquired"]++
		}
		if got := testutil.CollectAndCount(reg, "idem_claims_total"); got != len(want) {
			t.Errorf("idem_claims_total has %d series, want %d (one per outcome)", got, len(want))
		}
		for outcome, n := range want {
			labels := map[string]string{"backend": backend, "scope": "metrics-suite", "outcome": outcome}
			if got := MetricValue(t, reg, "idem_claims_total", labels); got != n {
				t.Errorf("idem_claims_total{outcome=%q} = %v, want %v", outcome, got, n)
			}
		}
		dups := want["in_progress"] + want["mismatch"] + want["replayed"]
		if got := MetricValue(t, reg, "idem_duplicates_total", map[string]string{"backend": backend, "scope": "metrics-suite"}); got != dups {
			t.Errorf("idem_duplicates_total = %v, want %v (in_progress, mismatch, replayed)", got, dups)
		}
	})
}
