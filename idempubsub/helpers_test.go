package idempubsub_test

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/pstest"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idempubsub"
	"github.com/idemhq/idem/idemtest"
)

// testProject is the project of every fake server's client.
const testProject = "idem-test"

// testLease is the source's lease in tests: Pub/Sub's minimum, so a crashed
// consumer's messages come back within seconds.
const testLease = 10 * time.Second

func TestMain(m *testing.M) {
	// Lets a test create a subscription with a 1 s ack deadline (Pub/Sub's minimum
	// is 10 s) to see the source renew it; set before any server starts, never
	// changed after, so no test races on it.
	pstest.SetMinAckDeadline(time.Second)
	os.Exit(m.Run())
}

// fake is an in-process Pub/Sub server (pstest) and a client connected to it.
type fake struct {
	srv    *pstest.Server
	client *pubsub.Client
}

// newFake starts a pstest server for t, closed when t ends.
func newFake(t testing.TB, opts ...pstest.ServerReactorOption) fake {
	t.Helper()
	srv := pstest.NewServer(opts...)
	t.Cleanup(func() { _ = srv.Close() })
	conn, err := grpc.NewClient(srv.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	client, err := pubsub.NewClient(context.Background(), testProject, option.WithGRPCConn(conn))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Close() })
	return fake{srv: srv, client: client}
}

var names atomic.Int64

func unique(prefix string) string { return fmt.Sprintf("%s-%d", prefix, names.Add(1)) }

// topicSub creates a topic and a subscription on it (cfg's Name and Topic are
// filled in) and returns their IDs.
func (f fake) topicSub(t testing.TB, cfg idempubsub.SubscriptionConfig) (topic, sub string) {
	t.Helper()
	ctx := context.Background()
	cfg.Topic, cfg.Name = unique("topic"), unique("sub")
	if err := idempubsub.EnsureTopic(ctx, f.client, cfg.Topic); err != nil {
		t.Fatal(err)
	}
	if cfg.DeadLetterTopic != "" {
		if err := idempubsub.EnsureTopic(ctx, f.client, cfg.DeadLetterTopic); err != nil {
			t.Fatal(err)
		}
	}
	if err := idempubsub.EnsureSubscription(ctx, f.client, cfg); err != nil {
		t.Fatal(err)
	}
	return cfg.Topic, cfg.Name
}

func (f fake) sink(t testing.TB) *idempubsub.Sink {
	t.Helper()
	s, err := idempubsub.NewSink(f.client, idempubsub.SinkConfig{})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func (f fake) source(t testing.TB, cfg idempubsub.SourceConfig) *idempubsub.Source {
	t.Helper()
	if cfg.Lease == 0 {
		cfg.Lease = testLease
	}
	src, err := idempubsub.NewSource(context.Background(), f.client, cfg)
	return idemtest.Opened(t, src, err)
}

// env is a fresh topic and subscription as idemtest sees a broker; the env promises
// what the source reports for its subscription.
func (f fake) env(t testing.TB, cfg idempubsub.SubscriptionConfig) idemtest.BrokerEnv {
	topic, sub := f.topicSub(t, cfg)
	probe := f.source(t, idempubsub.SourceConfig{Subscription: sub})
	return idemtest.BrokerEnv{
		Topic:     topic,
		Sink:      f.sink(t),
		NewSource: func(t *testing.T) idem.Source { return f.source(t, idempubsub.SourceConfig{Subscription: sub}) },
		Features:  probe.Features(),
		// An unsettled delivery of a closed source comes back when its last
		// deadline (the subscription's 10 s, or the source's 10 s lease) passes.
		Redelivery: testLease,
	}
}
