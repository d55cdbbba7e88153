package metrics

import "github.com/prometheus/client_golang/prometheus"

// Queue records the database as the queue (package queue): what its producers
// wrote, what its Sources claimed and settled, its periodic ticks, its sweeps,
// and, kept by Queue.Run, its messages by state. Its methods are safe on a nil
// receiver, which records nothing.
type Queue struct {
	enqueued *prometheus.CounterVec
	claimed  *prometheus.CounterVec
	settled  *prometheus.CounterVec
	parked   *prometheus.CounterVec
	periodic *prometheus.CounterVec
	swept    prometheus.Counter
	messages *prometheus.GaugeVec
	oldest   *prometheus.GaugeVec
}

// The states of idem_queue_messages.
const (
	QueueReady     = "ready"
	QueueRunning   = "running"
	QueueRetrying  = "retrying"
	QueueScheduled = "scheduled"
)

// NewQueue registers the queue's collectors on reg; nil reg, nil *Queue.
func NewQueue(reg prometheus.Registerer) (*Queue, error) {
	if reg == nil {
		return nil, nil
	}
	r := &registrar{reg: reg}
	m := &Queue{
		enqueued: r.counters("idem_queue_enqueued_total",
			"Messages producers handed to the queue, per topic and outcome: written (a row, in the producer's transaction: counted when written, whether or not that transaction commits) or duplicate (an unfinished message of the topic and id was there: nothing written).",
			"topic", "outcome"),
		claimed: r.counters("idem_queue_claimed_total",
			"Messages Sources leased from the queue, per topic (each claim counts an attempt).",
			"topic"),
		settled: r.counters("idem_queue_settled_total",
			"Claimed messages settled, per topic and outcome: applied, duplicate or dead (retired with the consumer's transaction, counted once it committed), acked (retired by a consumer in another database), nacked (put back: a failed handler, or released at Close), lease_lost (no longer this Source's: its lease ran out and another Source took it, or it was cancelled; its effect rolled back).",
			"topic", "outcome"),
		parked: r.counters("idem_queue_parked_total",
			"Claimed rows that could not be delivered (payload or headers above the bounds, headers not a JSON object) and were finished as dead with the reason, per topic: Queue.Finished lists them.",
			"topic"),
		periodic: r.counters("idem_queue_periodic_total",
			"Ticks of periodic schedules as Queue.Run saw them, per schedule and outcome: enqueued (by this process), taken (another process enqueued it) or failed (logged; the next tick is tried).",
			"schedule", "outcome"),
		swept: r.counter("idem_queue_swept_total",
			"Finished queue messages deleted by Queue.Run past the retention (queue.Config.Retention)."),
		messages: r.gauges("idem_queue_messages",
			"Unfinished queue messages per topic and state: ready (due, waiting for a consumer), running (leased), retrying (backing off after a failure), scheduled (waiting for their run-at), counted by Queue.Run every queue.Config.GaugeInterval (30 s).",
			"topic", "state"),
		oldest: r.gauges("idem_queue_oldest_ready_age_seconds",
			"Age of the oldest ready message per topic (since it was enqueued), 0 when none is ready, counted by Queue.Run every queue.Config.GaugeInterval (30 s): growing means no consumer takes the topic's messages.",
			"topic"),
	}
	if r.err != nil {
		return nil, r.err
	}
	return m, nil
}

// counter registers the counter name, described by help.
func (r *registrar) counter(name, help string) prometheus.Counter {
	return add(r, prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help}))
}

// Enqueued counts n messages of topic with outcome (written, duplicate).
func (m *Queue) Enqueued(topic, outcome string, n int) {
	if m == nil || n <= 0 {
		return
	}
	m.enqueued.WithLabelValues(topic, outcome).Add(float64(n))
}

// Claimed counts n messages of topic leased.
func (m *Queue) Claimed(topic string, n int) {
	if m == nil || n <= 0 {
		return
	}
	m.claimed.WithLabelValues(topic).Add(float64(n))
}

// Settled counts n messages of topic settled with outcome.
func (m *Queue) Settled(topic, outcome string, n int) {
	if m == nil || n <= 0 {
		return
	}
	m.settled.WithLabelValues(topic, outcome).Add(float64(n))
}

// Parked counts one undeliverable row of topic.
func (m *Queue) Parked(topic string) {
	if m == nil {
		return
	}
	m.parked.WithLabelValues(topic).Inc()
}

// Periodic counts one tick of schedule with outcome (enqueued, taken, failed).
func (m *Queue) Periodic(schedule, outcome string) {
	if m == nil {
		return
	}
	m.periodic.WithLabelValues(schedule, outcome).Inc()
}

// Swept counts n rows a sweep deleted.
func (m *Queue) Swept(n int64) {
	if m == nil || n <= 0 {
		return
	}
	m.swept.Add(float64(n))
}

// QueueTopic is one topic's unfinished messages, as Queue.Run counts them.
type QueueTopic struct {
	Topic                               string
	Ready, Running, Retrying, Scheduled int64
	OldestReadySeconds                  float64
}

// Topics sets the gauges to topics, and those of the topics in gone (listed
// before, every message of them finished since) to 0: a drained topic reads 0,
// not its last backlog.
func (m *Queue) Topics(topics []QueueTopic, gone []string) {
	if m == nil {
		return
	}
	for _, t := range topics {
		m.messages.WithLabelValues(t.Topic, QueueReady).Set(float64(t.Ready))
		m.messages.WithLabelValues(t.Topic, QueueRunning).Set(float64(t.Running))
		m.messages.WithLabelValues(t.Topic, QueueRetrying).Set(float64(t.Retrying))
		m.messages.WithLabelValues(t.Topic, QueueScheduled).Set(float64(t.Scheduled))
		m.oldest.WithLabelValues(t.Topic).Set(t.OldestReadySeconds)
	}
	for _, topic := range gone {
		for _, s := range []string{QueueReady, QueueRunning, QueueRetrying, QueueScheduled} {
			m.messages.WithLabelValues(topic, s).Set(0)
		}
		m.oldest.WithLabelValues(topic).Set(0)
	}
}
