package effect_test

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemhq/idem/effect"
)

// Two fences on one registry share idem_effects_total instead of failing to register.
func TestFencesShareMetrics(t *testing.T) {
	t.Parallel()
	forEachDB(t, func(t *testing.T, e env) {
		reg := prometheus.NewRegistry()
		for _, key := range []string{"o1", "o2"} {
			f := e.fence(t, effect.Config{Registerer: reg})
			if _, err := f.Do(context.Background(), key, "charge", func(context.Context, string) ([]byte, error) { return []byte("ok"), nil }); err != nil {
				t.Fatal(err)
			}
		}
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		var called float64
		for _, mf := range mfs {
			if mf.GetName() != "idem_effects_total" {
				continue
			}
			for _, m := range mf.GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() == "outcome" && l.GetValue() == "called" {
						called += m.GetCounter().GetValue()
					}
				}
			}
		}
		if called != 2 {
			t.Errorf("idem_effects_total{outcome=\"called\"} = %v over two fences, want 2", called)
		}
	})
}
