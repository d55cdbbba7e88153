package idemnats_test

import (
	"context"
	"testing"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemnats"
	"github.com/idemhq/idem/inbox/inboxtest"
	"github.com/nats-io/nats.go/jetstream"
)

// TestExactlyOnce: inboxtest.Proof's messages (3,000 in CI, 10,000 with `make proof`) through JetStream, each delivered at least twice
// (JetStream drops the republished copy; every first ack is lost), applied exactly
// once by the inbox on SQLite, on Postgres and on MySQL/MariaDB.
func TestExactlyOnce(t *testing.T) {
	t.Parallel()
	_, js := connect(t)
	inboxtest.Proof(t, brokerEnv(js), inboxtest.Options{MySQL: true})
}

// BenchmarkInbox: the inbox on JetStream + Postgres against a plain at-least-once
// consumer doing the same INSERT (the headline figure).
func BenchmarkInbox(b *testing.B) {
	_, js := connect(b)
	inboxtest.Bench(b, benchEnv(js))
}

// BenchmarkInboxMySQL: the same on MySQL/MariaDB.
func BenchmarkInboxMySQL(b *testing.B) {
	_, js := connect(b)
	inboxtest.BenchMySQL(b, benchEnv(js))
}

func benchEnv(js jetstream.JetStream) func(b *testing.B) inboxtest.BenchEnv {
	return func(b *testing.B) inboxtest.BenchEnv {
		stream, prefix := newStream(b, js)
		sink := newSink(b, js, idemnats.SinkConfig{})
		return inboxtest.BenchEnv{Topic: prefix + ".orders", Sink: sink, NewSource: func() (idem.Source, error) {
			return idemnats.NewSource(context.Background(), js, idemnats.SourceConfig{Stream: stream, Durable: "bench"})
		}}
	}
}
