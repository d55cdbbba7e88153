package idemmem_test

import (
	"testing"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemmem"
	"github.com/idemhq/idem/idemtest"
	"github.com/prometheus/client_golang/prometheus"
)

func newStore(t testing.TB, cfg idemmem.Config) *idemmem.Store {
	t.Helper()
	s, err := idemmem.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestConformance(t *testing.T) {
	t.Parallel()
	idemtest.StoreSuite(t, idemtest.Harness{
		New: func(t *testing.T) idem.Store { return newStore(t, idemmem.Config{}) },
	})
}

func TestMetricsSuite(t *testing.T) {
	t.Parallel()
	idemtest.MetricsSuite(t, "memory", func(t *testing.T, reg prometheus.Registerer) idem.Store {
		return newStore(t, idemmem.Config{Registerer: reg})
	})
}
