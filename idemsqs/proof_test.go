package idemsqs_test

import (
	"context"
	"testing"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemsqs"
	"github.com/idemhq/idem/idemsqs/sqsfake"
	"github.com/idemhq/idem/idemtest"
	"github.com/idemhq/idem/inbox/inboxtest"
)

// TestExactlyOnce: inboxtest.Proof's messages (3,000 in CI, 10,000 with `make proof`) through an SQS FIFO queue (the in-process fake),
// each published twice (SQS drops the second copy within its 5-minute window) and
// delivered at least twice (every first ack is lost and the message made visible
// again), with consumers killed and restarted mid-stream, applied exactly once by
// the inbox on SQLite and on Postgres.
func TestExactlyOnce(t *testing.T) {
	t.Parallel()
	srv := startFake(t, sqsfake.Config{})
	inboxtest.Proof(t, func(t *testing.T) idemtest.BrokerEnv { return setup(t, srv, idemsqs.QueueConfig{}).env() }, inboxtest.Options{})
}

// BenchmarkInbox: the inbox on SQS FIFO (the in-process fake) + Postgres against a
// plain at-least-once consumer doing the same INSERT on the same fake.
func BenchmarkInbox(b *testing.B) {
	srv := startFake(b, sqsfake.Config{})
	b.Cleanup(func() {
		b.Logf("receives retried by the SDK and answered by their attempt id: %d", srv.RetriedReceives())
	})
	inboxtest.Bench(b, func(b *testing.B) inboxtest.BenchEnv {
		f := setup(b, srv, idemsqs.QueueConfig{})
		return inboxtest.BenchEnv{Topic: f.queue, Sink: f.sink, NewSource: func() (idem.Source, error) {
			return idemsqs.NewSource(context.Background(), f.c, idemsqs.SourceConfig{Queue: f.queue})
		}}
	})
}
