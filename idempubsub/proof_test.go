package idempubsub_test

import (
	"testing"

	"github.com/idemhq/idem/idempubsub"
	"github.com/idemhq/idem/idemtest"
	"github.com/idemhq/idem/inbox/inboxtest"
)

// TestExactlyOnce: inboxtest.Proof's messages (3,000 in CI, 10,000 with `make proof`) through Pub/Sub (pstest, an exactly-once
// subscription), each published twice and delivered at least twice (every first
// ack is lost and the message Nak'ed back), with consumers killed and restarted
// mid-stream, applied exactly once by the inbox on SQLite and on Postgres.
func TestExactlyOnce(t *testing.T) {
	t.Parallel()
	inboxtest.Proof(t, func(t *testing.T) idemtest.BrokerEnv {
		return newFake(t).env(t, idempubsub.SubscriptionConfig{ExactlyOnce: true})
	}, inboxtest.Options{})
}
