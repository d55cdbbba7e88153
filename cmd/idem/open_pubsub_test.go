package main

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"cloud.google.com/go/pubsub/v2/pstest"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idempubsub"
	"github.com/idemhq/idem/internal/testsvc"
)

// The relay publishes to Pub/Sub (an in-process pstest reached the way an emulator
// is, through PUBSUB_EMULATOR_HOST), the ID in the Idem-Msg-Id attribute. Not
// parallel: it sets the variable for the whole process while it runs.
func TestRelaySQLiteToPubSub(t *testing.T) {
	srv := pstest.NewServer()
	t.Cleanup(func() { _ = srv.Close() })
	t.Setenv("PUBSUB_EMULATOR_HOST", srv.Addr)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client, err := pubsub.NewClient(ctx, "relay-test")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Close() })
	topic := testsvc.UniqueName("relaytest-")
	if err := idempubsub.EnsureTopic(ctx, client, topic); err != nil {
		t.Fatal(err)
	}
	if err := idempubsub.EnsureSubscription(ctx, client, idempubsub.SubscriptionConfig{Name: "sub-" + topic, Topic: topic}); err != nil {
		t.Fatal(err)
	}
	path, _, enqueue := sqliteOutbox(t, topic)
	enqueue("p1", "p2")
	r := startRelay(t, "--db", "sqlite:"+path, "--sink", "pubsub://relay-test", "--poll", "50ms")

	var ids []string
	for len(ids) < 2 && ctx.Err() == nil {
		resp, err := client.SubscriptionAdminClient.Pull(ctx, &pubsubpb.PullRequest{
			Subscription: "projects/relay-test/subscriptions/sub-" + topic, MaxMessages: 10})
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range resp.ReceivedMessages {
			ids = append(ids, m.Message.Attributes[idem.HeaderID])
		}
	}
	slices.Sort(ids) // an unordered subscription delivers in any order
	if strings.Join(ids, ",") != "p1,p2" {
		t.Fatalf("subscription got %v, want p1 and p2\n%s", ids, r.stderr)
	}
	r.checkHTTP(t, 2)
	r.stop(t)
}
