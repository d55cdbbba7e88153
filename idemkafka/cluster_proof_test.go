package idemkafka_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/idemhq/idem/idemtest"
	"github.com/idemhq/idem/inbox/inboxtest"
	"github.com/idemhq/idem/internal/testsvc"
)

// TestExactlyOnceThreeBrokers: the proof on a kfake cluster of 3 brokers and 6
// partitions, with 3 consumers in one group, each restarted mid-stream (rebalances),
// while every partition's leader moves to a random broker every 300 ms, as after a
// broker failure (kfake bumps the leader epoch; clients see NOT_LEADER and refresh
// their metadata). 10,000 messages, each delivered at least twice, applied once.
func TestExactlyOnceThreeBrokers(t *testing.T) {
	t.Parallel()
	inboxtest.Proof(t, func(t *testing.T) idemtest.BrokerEnv {
		var elections atomic.Int64
		topic := testsvc.UniqueName("idemkafka-")
		c, err := kfake.NewCluster(kfake.NumBrokers(3), kfake.SeedTopics(6, topic))
		if err != nil {
			t.Fatalf("kfake: %v", err)
		}
		stop := make(chan struct{})
		done := make(chan struct{})
		go func() {
			defer close(done)
			for {
				select {
				case <-stop:
					return
				case <-time.After(300 * time.Millisecond):
					c.ShufflePartitionLeaders()
					elections.Add(1)
				}
			}
		}()
		t.Cleanup(func() {
			close(stop)
			<-done
			c.Close()
			if elections.Load() == 0 {
				t.Error("no leader election happened during the proof")
			}
		})
		f := fixture{c: c, topic: topic, group: testsvc.UniqueName("group-"), sink: newSink(t, c)}
		return f.env()
	}, inboxtest.Options{Consumers: 3})
}
