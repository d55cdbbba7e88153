package stream

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemhq/idem/internal/metrics"
)

type streamMetrics struct {
	clients     prometheus.Gauge
	pending     prometheus.Gauge
	sent        prometheus.Counter
	unacked     prometheus.Gauge
	disconnects *prometheus.CounterVec
}

// newMetrics makes the server's collectors and registers them on reg, if set
// (reusing collectors another Server registered there).
func newMetrics(reg prometheus.Registerer) (m *streamMetrics, err error) {
	m = &streamMetrics{
		clients: prometheus.NewGauge(prometheus.GaugeOpts{Name: "idem_stream_clients", Help: "WebSocket clients connected."}),
		pending: prometheus.NewGauge(prometheus.GaugeOpts{Name: "idem_stream_pending",
			Help: "WebSocket connections whose hello has not been authorized yet (bounded by MaxPending)."}),
		sent: prometheus.NewCounter(prometheus.CounterOpts{Name: "idem_stream_events_sent_total",
			Help: "Events written to WebSocket clients."}),
		unacked: prometheus.NewGauge(prometheus.GaugeOpts{Name: "idem_stream_unacked",
			Help: "Events sent to connected clients and not yet acknowledged."}),
		disconnects: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "idem_stream_disconnects_total",
			Help: "WebSocket disconnections and refusals, by reason."}, []string{"reason"}),
	}
	if reg == nil {
		return m, nil
	}
	if m.clients, err = metrics.Register(reg, m.clients); err != nil {
		return nil, err
	}
	if m.pending, err = metrics.Register(reg, m.pending); err != nil {
		return nil, err
	}
	if m.sent, err = metrics.Register(reg, m.sent); err != nil {
		return nil, err
	}
	if m.unacked, err = metrics.Register(reg, m.unacked); err != nil {
		return nil, err
	}
	m.disconnects, err = metrics.Register(reg, m.disconnects)
	return m, err
}
