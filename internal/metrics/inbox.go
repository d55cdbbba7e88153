package metrics

import "github.com/prometheus/client_golang/prometheus"

// Inbox records an idempotent consumer's messages by outcome and its dead letters. Its
// methods are safe on a nil receiver.
type Inbox struct {
	consumer string
	messages *prometheus.CounterVec
	dups     *prometheus.CounterVec
	dead     *prometheus.CounterVec
	latency  prometheus.Observer
	replays  *prometheus.CounterVec
	refused  *prometheus.CounterVec
	open     *prometheus.GaugeVec // a series once counted: 0 is a count, not "not yet"
	lag      *prometheus.GaugeVec // a series only for a source that reports lag
}

// NewInbox registers the inbox collectors on reg for consumer; nil reg, nil *Inbox.
// Duplicates are counted in idem_duplicates_total under backend "inbox".
func NewInbox(reg prometheus.Registerer, consumer string) (*Inbox, error) {
	if reg == nil {
		return nil, nil
	}
	r := &registrar{reg: reg}
	messages := r.counters("idem_inbox_messages_total",
		"Deliveries settled by idem inboxes, by outcome (processed, duplicate, retried, dead_lettered).",
		"consumer", "outcome")
	dups := duplicates(r)
	dead := r.counters("idem_inbox_dead_letters_total",
		"Messages moved to the dead-letter table, by reason kind (permanent, max_attempts, no_key, key_reused, or a refusal's reason).",
		"consumer", "kind")
	latency := r.seconds("idem_inbox_batch_duration_seconds",
		"Time to process one batch: transaction, handlers, commit and acks.",
		0.0001, "consumer")
	replays := r.counters("idem_inbox_replays_total",
		"Replays of dead letters requested by operators, by outcome (applied, already_applied, failed, gave_up).",
		"consumer", "outcome")
	refused := r.counters("idem_inbox_refused_total",
		"Deliveries refused before applying (acked and dead-lettered), by reason (stale_key, future_key, untimed_key, deadline, bad_deadline).",
		"consumer", "reason")
	open := r.gauges("idem_inbox_dead_letters_open",
		"Open dead letters of the consumer (neither replayed nor discarded), counted from the table at start, every inbox.Config.GaugeInterval (30 s) and soon after the consumer dead-letters or replays; the count stops at 100000.",
		"consumer")
	lag := r.gauges("idem_inbox_lag_messages",
		"Messages the broker holds for the consumer and has not had acknowledged (not yet delivered, or delivered and not settled), as its Source reports it every inbox.Config.GaugeInterval (30 s); only for sources that report lag (idem.LagReporter).",
		"consumer")
	if r.err != nil {
		return nil, r.err
	}
	return &Inbox{consumer: consumer, messages: messages, dups: dups, dead: dead,
		latency: latency.WithLabelValues(consumer), replays: replays, refused: refused,
		open: open, lag: lag}, nil
}

// Settled counts n deliveries settled with outcome.
func (m *Inbox) Settled(outcome string, n int) {
	if m == nil || n == 0 {
		return
	}
	m.messages.WithLabelValues(m.consumer, outcome).Add(float64(n))
	if outcome == "duplicate" {
		m.dups.WithLabelValues("inbox", m.consumer).Add(float64(n))
	}
}

// DeadLettered counts one dead letter of kind.
func (m *Inbox) DeadLettered(kind string) {
	if m == nil {
		return
	}
	m.dead.WithLabelValues(m.consumer, kind).Inc()
	m.messages.WithLabelValues(m.consumer, "dead_lettered").Inc()
}

// Batch records the duration of one batch in seconds.
func (m *Inbox) Batch(seconds float64) {
	if m == nil {
		return
	}
	m.latency.Observe(seconds)
}

// Replayed counts one requested replay by outcome.
func (m *Inbox) Replayed(outcome string) {
	if m == nil {
		return
	}
	m.replays.WithLabelValues(m.consumer, outcome).Inc()
}

// Refused counts one delivery the inbox refused before applying it, by reason
// (stale_key, future_key, untimed_key, deadline, bad_deadline).
func (m *Inbox) Refused(reason string) {
	if m == nil {
		return
	}
	m.refused.WithLabelValues(m.consumer, reason).Inc()
}

// OpenDeadLetters sets the gauge of open dead letters to n.
func (m *Inbox) OpenDeadLetters(n int64) {
	if m == nil {
		return
	}
	m.open.WithLabelValues(m.consumer).Set(float64(n))
}

// Lag sets the gauge of the messages the broker holds unacknowledged to n.
func (m *Inbox) Lag(n int64) {
	if m == nil {
		return
	}
	m.lag.WithLabelValues(m.consumer).Set(float64(n))
}
