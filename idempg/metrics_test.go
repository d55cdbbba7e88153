package idempg_test

import (
	"context"
	"testing"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idempg"
	"github.com/idemhq/idem/idemtest"
	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
)

func TestMetrics(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	s, pool := newStore(t, idempg.Config{Registerer: reg})
	ctx := ctxFor(t)
	k := idem.Key{Scope: "metrics", ID: "k"}
	claim := func(c idem.Claim) idem.Result {
		t.Helper()
		res, err := s.Claim(ctx, c)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	res := claim(idem.Claim{Key: k})                               // acquired
	claim(idem.Claim{Key: k})                                      // in_progress
	claim(idem.Claim{Key: k, Fingerprint: []byte("other intent")}) // mismatch
	if err := s.Complete(ctx, k, res.Token, nil); err != nil {
		t.Fatal(err)
	}
	claim(idem.Claim{Key: k}) // replayed
	// The batch and the transactional path count too.
	if _, err := s.ClaimBatch(ctx, []idem.Claim{{Key: k}, {Key: idem.Key{Scope: "metrics", ID: "b"}}}); err != nil {
		t.Fatal(err)
	}
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, err := s.ClaimTx(ctx, tx, idem.Claim{Key: idem.Key{Scope: "metrics", ID: "tx"}})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	// Input errors are not claims: nothing is counted for them.
	if _, err := s.Claim(ctx, idem.Claim{Key: idem.Key{Scope: "metrics"}}); err == nil {
		t.Fatal("claim without an ID succeeded")
	}

	want := map[string]float64{"acquired": 3, "in_progress": 1, "mismatch": 1, "replayed": 2}
	for outcome, n := range want {
		c := claimsCounter(t, reg, outcome)
		if c != n {
			t.Errorf("idem_claims_total{outcome=%q} = %v, want %v", outcome, c, n)
		}
	}
	if got := idemtest.MetricValue(t, reg, "idem_duplicates_total", map[string]string{"scope": "metrics"}); got != 4 {
		t.Errorf("idem_duplicates_total = %v, want 4", got)
	}

	// idem_records is the planner's estimate: exact right after ANALYZE.
	if _, err := pool.Exec(ctx, "ANALYZE idem_records"); err != nil {
		t.Fatal(err)
	}
	if got := idemtest.MetricValue(t, reg, "idem_records", map[string]string{"backend": "postgres"}); got != 3 {
		t.Errorf("idem_records = %v after ANALYZE, want 3", got)
	}
}

func TestMetricsUnreachable(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	s, err := idempg.New(context.Background(), unreachablePool(t), idempg.Offline(idempg.Config{Registerer: reg}))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Claim(ctxFor(t), idem.Claim{Key: idem.Key{Scope: "down", ID: "k"}}); err == nil {
		t.Fatal("claim on an unreachable server succeeded")
	}
	if got := idemtest.MetricValue(t, reg, "idem_claims_total", map[string]string{"scope": "down", "outcome": "error"}); got != 1 {
		t.Errorf("idem_claims_total{outcome=error} = %v, want 1", got)
	}
}

func claimsCounter(t *testing.T, reg *prometheus.Registry, outcome string) float64 {
	return idemtest.MetricValue(t, reg, "idem_claims_total", map[string]string{"backend": "postgres", "scope": "metrics", "outcome": outcome})
}

func TestMetricsSuite(t *testing.T) {
	t.Parallel()
	idemtest.MetricsSuite(t, "postgres", func(t *testing.T, reg prometheus.Registerer) idem.Store {
		s, _ := newStore(t, idempg.Config{Registerer: reg})
		return s
	})
}
