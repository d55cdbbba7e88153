package idemamqp_test

import (
	"testing"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemamqp"
	"github.com/idemhq/idem/idemtest"
	"github.com/idemhq/idem/inbox/inboxtest"
)

// TestExactlyOnce: 10,000 messages through RabbitMQ (a quorum queue), each delivered
// at least twice, applied exactly once by the inbox on SQLite and on Postgres.
func TestExactlyOnce(t *testing.T) {
	t.Parallel()
	inboxtest.Proof(t, func(t *testing.T) idemtest.BrokerEnv {
		conn := dial(t)
		queue := declareQueue(t, idemamqp.QueueConfig{Quorum: true})
		cfg := idemamqp.SourceConfig{Queue: queue, Quorum: true, Prefetch: 256}
		return idemtest.BrokerEnv{
			Topic:     queue,
			Sink:      newSink(t, conn, idemamqp.SinkConfig{Mandatory: true}),
			NewSource: func(t *testing.T) idem.Source { return newSource(t, conn, cfg) },
		}
	}, inboxtest.Options{})
}

// BenchmarkInbox: the inbox on RabbitMQ + Postgres against a plain at-least-once
// consumer doing the same INSERT.
func BenchmarkInbox(b *testing.B) {
	conn := dial(b)
	inboxtest.Bench(b, func(b *testing.B) inboxtest.BenchEnv {
		queue := declareQueue(b, idemamqp.QueueConfig{})
		return inboxtest.BenchEnv{Topic: queue, Sink: newSink(b, conn, idemamqp.SinkConfig{}),
			NewSource: func() (idem.Source, error) {
				return idemamqp.NewSource(conn, idemamqp.SourceConfig{Queue: queue, Prefetch: 256})
			}}
	})
}
