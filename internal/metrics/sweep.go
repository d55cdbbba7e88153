package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// sweptTotal registers idem_swept_total{backend}: the rows sweeps removed, of the
// stores' records and of the tables with a retention (backend effect, saga).
func sweptTotal(r *registrar) *prometheus.CounterVec {
	return r.counters("idem_swept_total",
		"Expired records removed by sweeps.",
		"backend")
}

// Sweep records the sweeps of one table with a retention: what they removed, and
// when one last succeeded, so an alert can tell a sweeper that stopped (the table
// then grows) from one with nothing to do. Its methods are safe on a nil
// receiver, which records nothing.
type Sweep struct {
	swept prometheus.Counter
	last  prometheus.Gauge
}

// NewSweep registers idem_swept_total{backend} and
// idem_sweep_last_success_timestamp_seconds{backend} on reg. A nil reg returns a
// nil *Sweep.
func NewSweep(reg prometheus.Registerer, backend string) (*Sweep, error) {
	if reg == nil {
		return nil, nil
	}
	r := &registrar{reg: reg}
	swept := sweptTotal(r)
	last := add(r, prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "idem_sweep_last_success_timestamp_seconds",
		Help: "When a sweep of the table last ran to the end (Unix time): a sweeper that stopped leaves it behind.",
	}, []string{"backend"}))
	if r.err != nil {
		return nil, r.err
	}
	return &Sweep{swept: swept.WithLabelValues(backend), last: last.WithLabelValues(backend)}, nil
}

// Done records a sweep that removed n rows and ended with err.
func (m *Sweep) Done(n int, err error) {
	if m == nil {
		return
	}
	if n > 0 {
		m.swept.Add(float64(n))
	}
	if err == nil {
		m.last.Set(float64(time.Now().UnixNano()) / 1e9)
	}
}
