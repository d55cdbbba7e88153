package metrics

import "github.com/prometheus/client_golang/prometheus"

// Relay records an outbox relay's publications and the outbox's backlog. Its methods
// are safe on a nil receiver.
type Relay struct {
	published prometheus.Counter
	failed    prometheus.Counter
	rounds    prometheus.Counter
	latency   prometheus.Observer
	lag       prometheus.Observer
}

// NewRelay registers the relay collectors on reg; backlog is read at each scrape and
// returns the unpublished count and the age of the oldest unpublished message in
// seconds. A nil reg returns a nil *Relay.
func NewRelay(reg prometheus.Registerer, backlog func() (unpublished, oldestAge, parked float64)) (*Relay, error) {
	if reg == nil {
		return nil, nil
	}
	r := &registrar{reg: reg}
	published := add(r, prometheus.NewCounter(prometheus.CounterOpts{
		Name: "idem_relay_published_total", Help: "Outbox messages the relay published and marked."}))
	failed := add(r, prometheus.NewCounter(prometheus.CounterOpts{
		Name: "idem_relay_failures_total", Help: "Outbox messages whose publication failed, or whose row could not be decoded (retried with backoff, or parked)."}))
	rounds := add(r, prometheus.NewCounter(prometheus.CounterOpts{
		Name: "idem_relay_round_failures_total", Help: "Relay rounds that failed as a whole (the database, most often), retried with backoff."}))
	latency := add(r, prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "idem_relay_publish_duration_seconds", Help: "Time of one batch's Publish call to the broker.",
		Buckets: prometheus.ExponentialBuckets(0.0005, 3, 10)}))
	lag := add(r, prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "idem_relay_lag_seconds", Help: "From EnqueueTx to confirmed publication, per message.",
		Buckets: prometheus.ExponentialBuckets(0.001, 2.5, 12)}))
	for _, g := range []struct {
		name, help string
		pick       func(u, o, p float64) float64
	}{
		{"idem_outbox_unpublished", "Outbox messages waiting to be published (not parked).", func(u, _, _ float64) float64 { return u }},
		{"idem_outbox_oldest_age_seconds", "Age of the oldest unpublished outbox message.", func(_, o, _ float64) float64 { return o }},
		{"idem_outbox_parked", "Outbox messages parked after MaxAttempts, waiting for Retry.", func(_, _, p float64) float64 { return p }},
	} {
		add(r, prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: g.name, Help: g.help}, func() float64 {
			u, o, p := backlog()
			return g.pick(u, o, p)
		}))
	}
	if r.err != nil {
		return nil, r.err
	}
	return &Relay{published: published, failed: failed, rounds: rounds, latency: latency, lag: lag}, nil
}

// Publish records one Publish call of seconds, and how many messages it failed.
func (m *Relay) Publish(seconds float64, failed int) {
	if m == nil {
		return
	}
	m.latency.Observe(seconds)
	m.failed.Add(float64(failed))
}

// Failed records n messages that failed without a Publish call: rows that could
// not be decoded.
func (m *Relay) Failed(n int) {
	if m == nil {
		return
	}
	m.failed.Add(float64(n))
}

// RoundFailed records a round that failed as a whole.
func (m *Relay) RoundFailed() {
	if m == nil {
		return
	}
	m.rounds.Inc()
}

// Published records messages marked published, with the lag of each from enqueue.
func (m *Relay) Published(lags []float64) {
	if m == nil {
		return
	}
	m.published.Add(float64(len(lags)))
	for _, l := range lags {
		m.lag.Observe(l)
	}
}
