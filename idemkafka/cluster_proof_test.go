package idemkafka_test

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemtest"
	"github.com/idemhq/idem/inbox/inboxtest"
	"github.com/idemhq/idem/internal/testsvc"
)

// TestExactlyOnceThreeBrokers: the proof on a kfake cluster of 3 brokers and 6
// partitions, with 3 consumers in one group, each restarted mid-stream (rebalances),
// while every partition's leader moves to a random broker after every 1,000
// deliveries, as after a broker failure (kfake bumps the leader epoch; clients see
// NOT_LEADER and refresh their metadata). The proof's messages (3,000 in CI, 10,000 with `make proof`), each delivered at least
// twice, applied once. The elections follow the proof's progress, not the clock,
// so they happen however fast the machine is.
func TestExactlyOnceThreeBrokers(t *testing.T) {
	t.Parallel()
	inboxtest.Proof(t, func(t *testing.T) idemtest.BrokerEnv {
		topic := testsvc.UniqueName("idemkafka-")
		c, err := kfake.NewCluster(kfake.NumBrokers(3), kfake.SeedTopics(6, topic))
		if err != nil {
			t.Fatalf("kfake: %v", err)
		}
		faults := &inboxtest.Faults{Every: 1000, Inject: c.ShufflePartitionLeaders}
		t.Cleanup(func() {
			c.Close()
			if faults.Injected() == 0 {
				t.Error("no leader election happened during the proof")
			}
		})
		env := fixture{c: c, topic: topic, group: testsvc.UniqueName("group-"), sink: newSink(t, c)}.env()
		newSource := env.NewSource
		env.NewSource = func(t *testing.T) idem.Source { return faults.Wrap(newSource(t)) }
		return env
	}, inboxtest.Options{Consumers: 3})
}
