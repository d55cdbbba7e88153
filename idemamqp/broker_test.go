package idemamqp_test

import (
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemamqp"
	"github.com/idemhq/idem/idemtest"
)

// TestBrokerSuite runs the broker contract on a classic and on a quorum queue: only
// the quorum queue counts deliveries, so only it promises Attempts.
func TestBrokerSuite(t *testing.T) {
	t.Parallel()
	for _, quorum := range []bool{false, true} {
		name := "classic"
		if quorum {
			name = "quorum"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			idemtest.BrokerSuite(t, queueEnv(quorum, 0))
		})
	}
}

// queueEnv returns a maker of fresh queues as idemtest sees a broker: classic or
// quorum, consumed with prefetch (0 for the default).
func queueEnv(quorum bool, prefetch int) func(t *testing.T) idemtest.BrokerEnv {
	return func(t *testing.T) idemtest.BrokerEnv {
		conn := dial(t)
		queue := declareQueue(t, idemamqp.QueueConfig{Quorum: quorum})
		cfg := idemamqp.SourceConfig{Queue: queue, Quorum: quorum, Prefetch: prefetch}
		probe := newSource(t, conn, cfg) // for its Features: the env promises what the source reports
		features := probe.Features()
		if err := probe.Close(); err != nil {
			t.Fatal(err)
		}
		return idemtest.BrokerEnv{
			Topic:     queue,
			Sink:      newSink(t, conn, idemamqp.SinkConfig{Mandatory: true}),
			NewSource: func(t *testing.T) idem.Source { return newSource(t, conn, cfg) },
			Features:  features,
			// Closing a channel requeues its unacknowledged deliveries at once.
			Redelivery: time.Second,
		}
	}
}
