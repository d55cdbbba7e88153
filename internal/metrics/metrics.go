// Package metrics holds the Prometheus collectors shared by idem's stores. Nothing is
// global: a store registers its collectors on the Registerer its config names, and a
// nil *Store records nothing.
package metrics

import (
	"errors"
	"time"

	"github.com/idemhq/idem"
	"github.com/prometheus/client_golang/prometheus"
)

// Store records a store's claims, duplicates, latency and sweeps under the names of
// docs/observability.md. Its methods are safe on a nil receiver, which records nothing.
type Store struct {
	backend string
	claims  *prometheus.CounterVec
	dups    *prometheus.CounterVec
	latency prometheus.Observer
	swept   prometheus.Counter
}

// NewStore registers the store collectors on reg for backend. A nil reg returns a nil
// *Store. Registering twice on one registry (two stores of one process) reuses the
// collectors already there.
func NewStore(reg prometheus.Registerer, backend string) (*Store, error) {
	if reg == nil {
		return nil, nil
	}
	r := &registrar{reg: reg}
	claims := r.counters("idem_claims_total",
		"Claims answered by idem stores, by scope and outcome (acquired, replayed, in_progress, mismatch, error).",
		"backend", "scope", "outcome")
	dups := duplicates(r)
	latency := r.seconds("idem_claim_duration_seconds",
		"Latency of Claim calls, including the backend round trip.",
		0.00005, "backend")
	swept := sweptTotal(r)
	if r.err != nil {
		return nil, r.err
	}
	return &Store{
		backend: backend,
		claims:  claims,
		dups:    dups,
		latency: latency.WithLabelValues(backend),
		swept:   swept.WithLabelValues(backend),
	}, nil
}

// duplicates registers idem_duplicates_total{backend,scope}, shared by the stores
// and the inbox (which counts under backend "inbox").
func duplicates(r *registrar) *prometheus.CounterVec {
	return r.counters("idem_duplicates_total",
		"Claims that found the key already taken (replayed, in_progress or mismatch): duplicates suppressed.",
		"backend", "scope")
}

// RecordsFunc registers idem_records{backend}, read from count at each scrape.
func RecordsFunc(reg prometheus.Registerer, backend string, count func() float64) error {
	if reg == nil {
		return nil
	}
	_, err := Register(reg, prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name:        "idem_records",
		Help:        "Records the store currently holds (in progress and completed, not yet swept).",
		ConstLabels: prometheus.Labels{"backend": backend},
	}, count))
	return err
}

// Start returns the start time of a claim to pass to Claim later, and the zero time
// when m is nil, so a store without metrics does not read the clock for them.
func (m *Store) Start() time.Time {
	if m == nil {
		return time.Time{}
	}
	return time.Now()
}

// Claim records one claim that started at start and ended with outcome o or err.
func (m *Store) Claim(scope string, o idem.Outcome, err error, start time.Time) {
	if m == nil {
		return
	}
	m.latency.Observe(time.Since(start).Seconds())
	label := o.String()
	if err != nil {
		label = "error"
	}
	m.claims.WithLabelValues(m.backend, scope, label).Inc()
	if err == nil && o.Duplicate() {
		m.dups.WithLabelValues(m.backend, scope).Inc()
	}
}

// Swept records n records removed by a sweep.
func (m *Store) Swept(n int) {
	if m == nil || n <= 0 {
		return
	}
	m.swept.Add(float64(n))
}

// registrar registers collectors on one registry until one fails, and keeps that
// error: a constructor registers all its collectors, then checks once.
type registrar struct {
	reg prometheus.Registerer
	err error
}

// add registers c as Register does, unless r has failed before.
// Counters registers the counter vector name{labels…}, described by help, on reg,
// or returns the one already there (see Register). A nil reg registers nothing
// and returns nil, which a component keeps as "no metrics".
func Counters(reg prometheus.Registerer, name, help string, labels ...string) (*prometheus.CounterVec, error) {
	if reg == nil {
		return nil, nil
	}
	return Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels))
}

// counters registers the counter vector name{labels…}, described by help.
func (r *registrar) counters(name, help string, labels ...string) *prometheus.CounterVec {
	return add(r, prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels))
}

// gauges registers the gauge vector name{labels…}, described by help.
func (r *registrar) gauges(name, help string, labels ...string) *prometheus.GaugeVec {
	return add(r, prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, labels))
}

// gauge registers the gauge name, described by help.
func (r *registrar) gauge(name, help string) prometheus.Gauge {
	return add(r, prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help}))
}

// seconds registers the histogram vector name{labels…} of durations, described by
// help: ten buckets from first seconds up, each four times the one before.
func (r *registrar) seconds(name, help string, first float64, labels ...string) *prometheus.HistogramVec {
	return add(r, prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: name, Help: help, Buckets: prometheus.ExponentialBuckets(first, 4, 10)}, labels))
}

func add[C prometheus.Collector](r *registrar, c C) C {
	if r.err == nil {
		c, r.err = Register(r.reg, c)
	}
	return c
}

// Register registers c on reg (which must not be nil), or returns the collector
// of the same description already registered there: a second Store, Consumer or
// Server on one registry shares the first one's series.
func Register[C prometheus.Collector](reg prometheus.Registerer, c C) (C, error) {
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(C); ok {
				return existing, nil
			}
		}
		return c, err
	}
	return c, nil
}
