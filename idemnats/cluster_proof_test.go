package idemnats_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemnats"
	"github.com/idemhq/idem/idemnats/natsserver"
	"github.com/idemhq/idem/idemtest"
	"github.com/idemhq/idem/inbox/inboxtest"
)

// TestExactlyOnceOnCluster: the proof on a 3-node JetStream cluster with an R3
// stream, 3 consumers sharing one durable (each restarted mid-stream), while the
// stream's leader is killed and restarted after every 2,000 deliveries: the proof's
// messages (3,000 in CI, three kills a database; 10,000 with `make proof`), each
// delivered at least twice, applied once. The kills follow the
// proof's progress, not the clock, so they happen however fast the machine is.
func TestExactlyOnceOnCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-node cluster")
	}
	t.Parallel()
	inboxtest.Proof(t, func(t *testing.T) idemtest.BrokerEnv {
		ctx := context.Background()
		c, err := natsserver.StartCluster(ctx, natsserver.ClusterConfig{Dir: t.TempDir()})
		if err != nil {
			t.Fatal(err)
		}
		nc, err := nats.Connect(c.ClientURLs(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
		if err != nil {
			c.Shutdown()
			t.Fatal(err)
		}
		js := jsOf(t, nc)
		if _, err := idemnats.EnsureStream(ctx, js, idemnats.StreamConfig{Name: "ORDERS", Subjects: []string{"orders.>"}, Replicas: 3}); err != nil {
			t.Fatal(err)
		}
		var killed atomic.Int64
		faults := &inboxtest.Faults{Every: 2000, Inject: func() { // the stream leader killed and restarted
			i := c.StreamLeader("ORDERS")
			if i < 0 {
				return // between leaders: the next mark kills the one elected
			}
			c.Kill(i)
			killed.Add(1)
			rctx, cancel := context.WithTimeout(ctx, time.Minute)
			defer cancel()
			if err := c.Restart(rctx, i); err != nil {
				t.Errorf("restart node %d: %v", i, err)
			}
		}}
		t.Cleanup(func() {
			nc.Close()
			c.Shutdown()
			if killed.Load() == 0 {
				t.Errorf("no stream leader was killed during the proof (%d faults due, none found a leader)", faults.Injected())
			}
			t.Logf("%d stream leaders killed", killed.Load())
		})
		sink := newSink(t, js, idemnats.SinkConfig{})
		return idemtest.BrokerEnv{
			Topic: "orders.created",
			Sink:  sink,
			NewSource: func(t *testing.T) idem.Source {
				return faults.Wrap(openSource(t, js, idemnats.SourceConfig{Stream: "ORDERS", Durable: "workers"}))
			},
			Features:   sink.Features(),
			Redelivery: testAckWait,
		}
	}, inboxtest.Options{Consumers: 3})
}
