package idemredis_test

import (
	"testing"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemredis"
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
		c, err := counter(reg, "idem_claims_total", map[string]string{"backend": "redis", "scope": "metrics", "outcome": outcome})
		if err != nil || c != want {
			t.Errorf("idem_claims_total{outcome=%q} = %v (%v), want %v", outcome, c, err, want)
		}
	}
	if d, err := counter(reg, "idem_duplicates_total", map[string]string{"backend": "redis", "scope": "metrics"}); err != nil || d != 3 {
		t.Errorf("idem_duplicates_total = %v (%v), want 3", d, err)
	}
}

// counter reads one counter series from reg by its labels.
func counter(reg *prometheus.Registry, name string, labels map[string]string) (float64, error) {
	mfs, err := reg.Gather()
	if err != nil {
		return 0, err
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metric:
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if labels[lp.GetName()] != lp.GetValue() {
					continue metric
				}
			}
			return m.GetCounter().GetValue(), nil
		}
	}
	return 0, nil
}
