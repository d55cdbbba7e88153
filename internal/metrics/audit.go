package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// AuditRow is what Audit.Run records of one row of a report (audit.Row).
type AuditRow struct {
	Topic, Consumer string
	Counts          map[string]int64         // by state
	Latency         map[string]time.Duration // by quantile label
	// DupRatio is the consumer's duplicate deliveries ÷ all its deliveries,
	// negative when not measured.
	DupRatio float64
}

// Audit records the runs of an audit (package audit). Its methods are safe on
// a nil receiver.
type Audit struct {
	messages *prometheus.GaugeVec
	latency  *prometheus.GaugeVec
	repaired *prometheus.CounterVec
	runs     *prometheus.CounterVec
	last     prometheus.Gauge
	blind    prometheus.Gauge
	duration prometheus.Gauge
	dups     *prometheus.GaugeVec
}

// NewAudit registers the audit's collectors on reg; nil reg, nil *Audit.
func NewAudit(reg prometheus.Registerer) (*Audit, error) {
	if reg == nil {
		return nil, nil
	}
	r := &registrar{reg: reg}
	m := &Audit{
		messages: r.gauges("idem_audit_messages",
			"Messages of the last audit's window, per topic, consumer and state: published, applied, dead_lettered, missing (published longer ago than the grace and neither applied nor dead-lettered), in_flight, republished (repair copies).",
			"topic", "consumer", "state"),
		latency: r.gauges("idem_audit_latency_seconds",
			"End-to-end latency (outbox enqueue to the consumer's claim of the key) of the messages the last audit found applied, per topic and consumer, at quantile 0.5, 0.9, 0.99 and 1 (the maximum).",
			"topic", "consumer", "quantile"),
		repaired: r.counters("idem_audit_repaired_total",
			"Missing messages the audit republished under their original ids, per topic.",
			"topic"),
		runs: r.counters("idem_audit_runs_total",
			"Audit runs, by outcome (ok, failed).",
			"outcome"),
		last: r.gauge("idem_audit_last_success_timestamp_seconds",
			"Unix time of the last audit run that read its whole window."),
		blind: r.gauge("idem_audit_blind_consumers",
			"Consumers the last audit could not see (no key records: not running, keyed by something else than the message id, or a sequence/LSN consumer)."),
		duration: r.gauge("idem_audit_run_duration_seconds",
			"How long the last audit run took."),
		dups: r.gauges("idem_audit_duplicate_delivery_ratio",
			"Deliveries the consumer dropped as duplicates of a key it held, as a fraction of all its deliveries since its processes started, as the last audit read them from their idem_inbox_messages_total (only with audit.Config.Deliveries).",
			"consumer"),
	}
	if r.err != nil {
		return nil, r.err
	}
	return m, nil
}

// Run records a run: its rows' counts and latencies when it read its whole
// window (err nil), its outcome either way.
func (m *Audit) Run(rows []AuditRow, blind int, seconds float64, err error) {
	if m == nil {
		return
	}
	m.duration.Set(seconds)
	if err != nil {
		m.runs.WithLabelValues("failed").Inc()
		return
	}
	m.runs.WithLabelValues("ok").Inc()
	m.last.SetToCurrentTime()
	m.blind.Set(float64(blind))
	for _, row := range rows {
		for state, n := range row.Counts {
			m.messages.WithLabelValues(row.Topic, row.Consumer, state).Set(float64(n))
		}
		for q, d := range row.Latency {
			m.latency.WithLabelValues(row.Topic, row.Consumer, q).Set(d.Seconds())
		}
		if row.DupRatio >= 0 {
			m.dups.WithLabelValues(row.Consumer).Set(row.DupRatio)
		}
	}
}

// Repaired counts one republished message of topic.
func (m *Audit) Repaired(topic string) {
	if m == nil {
		return
	}
	m.repaired.WithLabelValues(topic).Inc()
}

// AuditInterval exports the interval of a continuous audit (idem audit
// --every), so that an alert can tell a stale audit from a slow schedule.
func AuditInterval(reg prometheus.Registerer, every time.Duration) error {
	r := &registrar{reg: reg}
	g := r.gauge("idem_audit_interval_seconds", "The interval of a continuous audit (idem audit --every): idem_audit_last_success_timestamp_seconds older than 3 intervals means the audit is stale.")
	if r.err != nil {
		return r.err
	}
	g.Set(every.Seconds())
	return nil
}
