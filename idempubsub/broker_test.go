package idempubsub_test

import (
	"testing"

	"github.com/idemhq/idem/idempubsub"
	"github.com/idemhq/idem/idemtest"
)

// TestBrokerSuite runs the broker contract on pstest on a plain subscription and on
// an exactly-once one with a dead-letter policy, the only kind on which Pub/Sub
// counts deliveries (so only it promises Attempts). Ordering is checked by
// TestOrdering instead: pstest hands out only the oldest unacknowledged message of
// an ordering key, so the suite's receive-20-then-ack steps cannot run on an
// ordered subscription there.
func TestBrokerSuite(t *testing.T) {
	t.Parallel()
	for name, cfg := range map[string]idempubsub.SubscriptionConfig{
		"plain":                    {},
		"exactly-once-dead-letter": {ExactlyOnce: true, DeadLetterTopic: unique("dead")},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			f := newFake(t)
			idemtest.BrokerSuite(t, func(t *testing.T) idemtest.BrokerEnv { return f.env(t, cfg) })
		})
	}
}
