package idemtest

import (
	"context"
	"testing"

	"github.com/idemhq/idem"
	"github.com/prometheus/client_golang/prometheus"
)

// MetricValue returns the value of the series of family name whose labels include
// labels: a counter's or gauge's value, a histogram's sample count. It fails t if
// there is no such series.
func MetricValue(t testing.TB, g prometheus.Gatherer, name string, labels map[string]string) float64 {
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
			switch {
			case m.Counter != nil:
				return m.GetCounter().GetValue()
			case m.Gauge != nil:
				return m.GetGauge().GetValue()
			case m.Histogram != nil:
				return float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	t.Fatalf("no series %s%v", name, labels)
	return 0
}

// MetricsSuite checks that a store reports its claims as DESIGN.md §5 names them:
// idem_claims_total by outcome, idem_duplicates_total, and the claim latency
// histogram. newStore returns a fresh store of backend registering on reg.
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

		labels := func(outcome string) map[string]string {
			return map[string]string{"backend": backend, "scope": "metrics-suite", "outcome": outcome}
		}
		for _, outcome := range []string{"acquired", "in_progress", "mismatch", "replayed"} {
			if got := MetricValue(t, reg, "idem_claims_total", labels(outcome)); got != 1 {
				t.Errorf("idem_claims_total{outcome=%q} = %v, want 1", outcome, got)
			}
		}
		if got := MetricValue(t, reg, "idem_duplicates_total", map[string]string{"backend": backend, "scope": "metrics-suite"}); got != 3 {
			t.Errorf("idem_duplicates_total = %v, want 3 (in_progress, mismatch, replayed)", got)
		}
		if got := MetricValue(t, reg, "idem_claim_duration_seconds", map[string]string{"backend": backend}); got != 4 {
			t.Errorf("idem_claim_duration_seconds has %v samples, want 4", got)
		}
	})
}
