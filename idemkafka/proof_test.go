package idemkafka_test

import (
	"testing"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemkafka"
	"github.com/idemhq/idem/idemtest"
	"github.com/idemhq/idem/inbox/inboxtest"
)

func proofEnv(t *testing.T) idemtest.BrokerEnv { return setup(t, 4).env() }

// TestExactlyOnce: inboxtest.Proof's messages (3,000 in CI, 10,000 with `make proof`) through Kafka (kfake, 4 partitions), each
// delivered at least twice, with consumers joining and leaving the group mid-stream,
// applied exactly once by the inbox on SQLite and on Postgres.
func TestExactlyOnce(t *testing.T) {
	t.Parallel()
	inboxtest.Proof(t, proofEnv, inboxtest.Options{})
}

// TestExactlyOnceByOffset: the same with dedup by (topic, partition, offset), kept
// as one idemseq window per partition in the effect's transaction.
func TestExactlyOnceByOffset(t *testing.T) {
	t.Parallel()
	inboxtest.Proof(t, proofEnv, inboxtest.Options{Sequences: idemkafka.Sequence})
}

// BenchmarkInbox: the inbox on Kafka (kfake) + Postgres against a plain at-least-once
// consumer doing the same INSERT.
func BenchmarkInbox(b *testing.B) {
	inboxtest.Bench(b, func(b *testing.B) inboxtest.BenchEnv {
		f := setup(b, 4)
		return inboxtest.BenchEnv{Topic: f.topic, Sink: f.sink, NewSource: func() (idem.Source, error) {
			return idemkafka.NewSource(idemkafka.SourceConfig{Brokers: f.c.ListenAddrs(), Group: f.group,
				Topics: []string{f.topic}, Options: fastGroup()})
		}}
	})
}
