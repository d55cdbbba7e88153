package idemredis_test

import (
	"testing"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemredis"
	"github.com/idemhq/idem/idemtest"
	"github.com/prometheus/client_golang/prometheus"
)

func TestMetricsSuite(t *testing.T) {
	t.Parallel()
	idemtest.MetricsSuite(t, "redis", func(t *testing.T, reg prometheus.Registerer) idem.Store {
		return setup(t, idemredis.Config{Registerer: reg}).store
	})
}
