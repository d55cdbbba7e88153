package pgcdc

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemhq/idem/internal/metrics"
)

// relayMetrics are a relay's collectors; its methods are safe on a nil receiver.
type relayMetrics struct {
	published  prometheus.Counter
	publish    prometheus.Observer
	commitLag  prometheus.Observer
	lagBytes   prometheus.Gauge
	lagSeconds prometheus.Gauge
	retained   prometheus.Gauge
	active     prometheus.Gauge
	failures   prometheus.Counter
	parked     prometheus.Counter
	marked     prometheus.Counter
	ignored    prometheus.Counter

	slotLost      prometheus.Counter
	slotRecovered prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) (*relayMetrics, error) {
	if reg == nil {
		return nil, nil
	}
	var err error
	reg1 := func(c prometheus.Collector) prometheus.Collector {
		if err == nil {
			c, err = metrics.Register(reg, c)
		}
		return c
	}
	gauge := func(name, help string) prometheus.Gauge {
		c, _ := reg1(prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help})).(prometheus.Gauge)
		return c
	}
	m := &relayMetrics{
		lagBytes:   gauge("idem_cdc_lag_bytes", "WAL between the server's current position and the slot's confirmed (broker-acknowledged) position."),
		lagSeconds: gauge("idem_cdc_lag_seconds", "Age of the oldest commit the relay read and the broker has not acknowledged yet; 0 when caught up."),
		retained:   gauge("idem_cdc_retained_wal_bytes", "WAL the server keeps for the relay's slot (current position minus restart_lsn)."),
		active:     gauge("idem_cdc_active", "1 while this relay holds its slot's lock and reads it; 0 on a standby."),
	}
	counter := func(name, help string) prometheus.Counter {
		c, _ := reg1(prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})).(prometheus.Counter)
		return c
	}
	m.published = counter("idem_cdc_published_total", "Messages the CDC relay published and the broker acknowledged.")
	m.failures = counter("idem_cdc_publish_failures_total", "Publish calls of the CDC relay that failed (a batch, or one message of a failed batch sent again alone).")
	m.parked = counter("idem_cdc_parked_total", "Messages the CDC relay could not publish and parked in the outbox table for an operator (idem outbox, the admin API).")
	m.marked = counter("idem_cdc_marked_total", "Outbox rows the CDC relay marked published (set published_at) after the broker acknowledged them and before it confirmed them to the slot "+
		"(none with Config.SkipMarkPublished).")
	m.ignored = counter("idem_cdc_messages_ignored_total",
		"Logical decoding messages of the outbox's prefix the CDC relay did not publish because WAL messages are off (Config.Messages, --cdc-messages).")
	m.slotLost = counter("idem_cdc_slot_lost_total",
		"Replication slots the CDC relay had and found lost (missing, or invalidated by max_slot_wal_keep_size) and re-created, recovering the gap from the outbox table.")
	m.slotRecovered = counter("idem_cdc_slot_recovered_total",
		"Outbox rows committed while the relay's slot was lost (not marked published, not parked) that the relay published when it re-created the slot.")
	h, _ := reg1(prometheus.NewHistogram(prometheus.HistogramOpts{Name: "idem_cdc_publish_duration_seconds",
		Help: "Time of one batch's Publish call to the broker.", Buckets: prometheus.ExponentialBuckets(0.0005, 3, 10)})).(prometheus.Histogram)
	m.publish = h
	h2, _ := reg1(prometheus.NewHistogram(prometheus.HistogramOpts{Name: "idem_cdc_commit_to_publish_seconds",
		Help: "From a message's commit to the broker's acknowledgement.", Buckets: prometheus.ExponentialBuckets(0.0005, 2.5, 14)})).(prometheus.Histogram)
	m.commitLag = h2
	if err != nil {
		return nil, err
	}
	return m, nil
}

func (m *relayMetrics) setActive(v float64) {
	if m != nil {
		m.active.Set(v)
	}
}
