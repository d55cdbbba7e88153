package testsvc

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// Sum gathers g and returns the sum of the series of metric name (counters and
// gauges) whose labels include every name and value of labels, given as pairs
// ("outcome", "called"); with no labels, of all its series. A metric g does not
// have sums to 0.
func Sum(t testing.TB, g prometheus.Gatherer, name string, labels ...string) float64 {
	t.Helper()
	if len(labels)%2 != 0 {
		t.Fatalf("testsvc.Sum: labels %q are not pairs", labels)
	}
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, m := range mf.GetMetric() {
			have := map[string]string{}
			for _, l := range m.GetLabel() {
				have[l.GetName()] = l.GetValue()
			}
			for i := 0; i < len(labels); i += 2 {
				if v, ok := have[labels[i]]; !ok || v != labels[i+1] {
					continue series
				}
			}
			sum += m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	return sum
}
