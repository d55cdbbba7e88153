package metrics

import "github.com/prometheus/client_golang/prometheus"

// NewBuild registers idem_build_info on reg: a gauge of 1 whose labels name the
// build a daemon runs (its release version, VCS revision and Go version), the
// Prometheus convention for joining a daemon's series with its version. A nil reg
// registers nothing.
func NewBuild(reg prometheus.Registerer, version, revision, goVersion string) error {
	if reg == nil {
		return nil
	}
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "idem_build_info",
		Help:        "The build of this idem daemon (always 1): release version, VCS revision and Go version in the labels.",
		ConstLabels: prometheus.Labels{"version": version, "revision": revision, "goversion": goVersion},
	})
	g.Set(1)
	_, err := Register(reg, g)
	return err
}
