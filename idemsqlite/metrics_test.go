package idemsqlite_test

import (
	"strings"
	"testing"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemsqlite"
	"github.com/idemhq/idem/idemtest"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestMetrics(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	clock := newFakeClock()
	s, _ := openStore(t, idemsqlite.Config{Registerer: reg, Now: clock.Now})
	ctx := ctxFor(t)
	k := idem.Key{Scope: "tenant", ID: "k"}
	res, err := s.Claim(ctx, idem.Claim{Key: k})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Complete(ctx, k, res.Token, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Claim(ctx, idem.Claim{Key: k}); err != nil { // replayed
		t.Fatal(err)
	}
	tx, err := s.DB().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.ClaimTx(ctx, tx, idem.Claim{Key: k}); err != nil { // replayed, in tx
		t.Fatal(err)
	}
	_ = tx.Rollback()
	if _, err := s.ClaimBatch(ctx, []idem.Claim{{Key: idem.Key{Scope: "tenant", ID: "b"}, Lease: 1}}); err != nil {
		t.Fatal(err)
	}
	clock.Advance(1) // the batch claim's 1ns lease has passed
	if n, err := s.Sweep(ctx); err != nil || n != 1 {
		t.Fatalf("Sweep = %d, %v; want 1", n, err)
	}

	const want = `
# HELP idem_claims_total Claims answered by idem stores, by scope and outcome (acquired, replayed, in_progress, mismatch, error).
# TYPE idem_claims_total counter
idem_claims_total{backend="sqlite",outcome="acquired",scope="tenant"} 2
idem_claims_total{backend="sqlite",outcome="replayed",scope="tenant"} 2
# HELP idem_duplicates_total Claims that found the key already taken (replayed, in_progress or mismatch): duplicates suppressed.
# TYPE idem_duplicates_total counter
idem_duplicates_total{backend="sqlite",scope="tenant"} 2
# HELP idem_records Records the store currently holds (in progress and completed, not yet swept).
# TYPE idem_records gauge
idem_records{backend="sqlite"} 1
# HELP idem_swept_total Expired records removed by sweeps.
# TYPE idem_swept_total counter
idem_swept_total{backend="sqlite"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want),
		"idem_claims_total", "idem_duplicates_total", "idem_records", "idem_swept_total"); err != nil {
		t.Fatal(err)
	}
	if n := testutil.CollectAndCount(reg, "idem_claim_duration_seconds"); n != 1 {
		t.Fatalf("idem_claim_duration_seconds series = %d, want 1", n)
	}
}

func TestMetricsSuite(t *testing.T) {
	t.Parallel()
	idemtest.MetricsSuite(t, "sqlite", func(t *testing.T, reg prometheus.Registerer) idem.Store {
		s, _ := openStore(t, idemsqlite.Config{Registerer: reg})
		return s
	})
}
