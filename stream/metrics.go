package stream

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	clients     prometheus.Gauge
	sent        prometheus.Counter
	unacked     prometheus.Gauge
	disconnects *prometheus.CounterVec
}

// newMetrics makes the server's collectors and registers them on reg, if set
// (reusing collectors another Server registered there).
func newMetrics(reg prometheus.Registerer) (m *metrics, err error) {
	m = &metrics{}
	if m.clients, err = register(reg, prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "idem_stream_clients", Help: "WebSocket clients connected."})); err != nil {
		return nil, err
	}
	if m.sent, err = register(reg, prometheus.NewCounter(prometheus.CounterOpts{
		Name: "idem_stream_events_sent_total", Help: "Events written to WebSocket clients."})); err != nil {
		return nil, err
	}
	if m.unacked, err = register(reg, prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "idem_stream_unacked", Help: "Events sent to connected clients and not yet acknowledged."})); err != nil {
		return nil, err
	}
	m.disconnects, err = register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "idem_stream_disconnects_total", Help: "WebSocket disconnections and refusals, by reason."}, []string{"reason"}))
	return m, err
}

func register[C prometheus.Collector](reg prometheus.Registerer, c C) (C, error) {
	if reg == nil {
		return c, nil
	}
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
