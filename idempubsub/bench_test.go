package idempubsub_test

import (
	"context"
	"testing"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idempubsub"
	"github.com/idemhq/idem/inbox/inboxtest"
)

// BenchmarkInbox: the inbox on Pub/Sub (pstest, in process) + Postgres against a
// plain at-least-once consumer doing the same INSERT, on a plain and on an
// exactly-once subscription, each sub-benchmark on a fresh fake.
func BenchmarkInbox(b *testing.B) {
	for name, cfg := range map[string]idempubsub.SubscriptionConfig{"sub=plain": {}, "sub=exactly-once": {ExactlyOnce: true}} {
		b.Run(name, func(b *testing.B) {
			inboxtest.Bench(b, func(b *testing.B) inboxtest.BenchEnv {
				f := newFake(b)
				topic, sub := f.topicSub(b, cfg)
				return inboxtest.BenchEnv{Topic: topic, Sink: f.sink(b), NewSource: func() (idem.Source, error) {
					return idempubsub.NewSource(context.Background(), f.client, idempubsub.SourceConfig{Subscription: sub, Lease: testLease})
				}}
			})
		})
	}
}
