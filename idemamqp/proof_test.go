package idemamqp_test

import (
	"testing"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemamqp"
	"github.com/idemhq/idem/inbox/inboxtest"
)

// TestExactlyOnce: inboxtest.Proof's messages (3,000 in CI, 10,000 with `make proof`) through RabbitMQ (a quorum queue), each delivered
// at least twice, applied exactly once by the inbox on SQLite and on Postgres.
func TestExactlyOnce(t *testing.T) {
	t.Parallel()
	inboxtest.Proof(t, queueEnv(true, 256), inboxtest.Options{})
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
