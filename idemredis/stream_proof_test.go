package idemredis_test

import (
	"testing"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemredis"
	"github.com/idemhq/idem/inbox/inboxtest"
)

// TestStreamExactlyOnce: inboxtest.Proof's messages (3,000 in CI, 10,000 with `make proof`) through Redis Streams, each delivered at
// least twice, applied exactly once by the inbox on SQLite and on Postgres.
func TestStreamExactlyOnce(t *testing.T) {
	t.Parallel()
	inboxtest.Proof(t, streamEnv, inboxtest.Options{})
}

// BenchmarkStreamInbox: the inbox on Redis Streams + Postgres against a plain
// at-least-once consumer doing the same INSERT.
func BenchmarkStreamInbox(b *testing.B) {
	inboxtest.Bench(b, func(b *testing.B) inboxtest.BenchEnv {
		bn := setup(b, idemredis.Config{})
		sink, err := idemredis.NewStreamSink(bn.client, idemredis.StreamSinkConfig{})
		if err != nil {
			b.Fatal(err)
		}
		stream := bn.prefix + "stream"
		return inboxtest.BenchEnv{Topic: stream, Sink: sink, NewSource: func() (idem.Source, error) {
			return idemredis.NewStreamSource(bn.client, idemredis.StreamSourceConfig{Stream: stream, Group: "bench"})
		}}
	})
}
