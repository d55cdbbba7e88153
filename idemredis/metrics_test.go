package idemredis_test

import (
	"testing"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemredis"
	"github.com/idemhq/idem/idemtest"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestMetrics(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	b := setup(t, idemredis.Config{Registerer: reg})
	ctx := ctxFor(t)
	k := idem.Key{Scope: "metrics", ID: "k"}
	res, err := b.store.Claim(ctx, idem.Claim{Key: k}) // acquired
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.store.Claim(ctx, idem.Claim{Key: k}); err != nil { // in progress
		t.Fatal(err)
	}
	if err := b.store.Complete(ctx, k, res.Token, nil); err != nil {
		t.Fatal(err)
	}
	// Batch claims count too: replayed, mismatch, acquired.
	if _, err := b.store.ClaimBatch(ctx, []idem.Claim{
		{Key: k}, {Key: k, Fingerprint: []byte("other")}, {Key: idem.Key{Scope: "metrics", ID: "fresh"}},
	}); err != nil {
		t.Fatal(err)
	}
	if got := testutil.CollectAndCount(reg, "idem_claims_total"); got != 4 { // four outcome series
		t.Errorf("idem_claims_total has %d series, want 4", got)
	}
	for outcome, want := range map[string]float64{"acquired": 2, "in_progress": 1, "replayed": 1, "mismatch": 1} {
		c := idemtest.MetricValue(t, reg, "idem_claims_total", map[string]string{"backend": "redis", "scope": "metrics", "outcome": outcome})
		if c != want {
			t.Errorf("idem_claims_total{outcome=%q} = %v, want %v", outcome, c, want)
		}
	}
	if d := idemtest.MetricValue(t, reg, "idem_duplicates_total", map[string]string{"backend": "redis", "scope": "metrics"}); d != 3 {
		t.Errorf("idem_duplicates_total = %v, want 3", d)
	}
}

func TestMetricsSuite(t *testing.T) {
	t.Parallel()
	idemtest.MetricsSuite(t, "redis", func(t *testing.T, reg prometheus.Registerer) idem.Store {
		return setup(t, idemredis.Config{Registerer: reg}).store
	})
}
