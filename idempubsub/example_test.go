package idempubsub_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/pstest"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idempubsub"
)

// Publish an order event and consume it from an exactly-once subscription: the
// source renews the message's ack deadline until Ack, and Ack returns once Pub/Sub
// confirmed it. An in-process fake (pstest) stands in for Pub/Sub here; in
// production, pubsub.NewClient(ctx, project) connects to the service (or to the
// emulator named by PUBSUB_EMULATOR_HOST).
func Example() {
	srv := pstest.NewServer()
	defer srv.Close()
	conn, err := grpc.NewClient(srv.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client, err := pubsub.NewClient(ctx, "shop", option.WithGRPCConn(conn))
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()

	if err := idempubsub.EnsureTopic(ctx, client, "orders"); err != nil {
		log.Fatal(err)
	}
	err = idempubsub.EnsureSubscription(ctx, client, idempubsub.SubscriptionConfig{Name: "billing", Topic: "orders", ExactlyOnce: true, Ordering: true})
	if err != nil {
		log.Fatal(err)
	}

	sink, err := idempubsub.NewSink(client, idempubsub.SinkConfig{})
	if err != nil {
		log.Fatal(err)
	}
	err = sink.Publish(ctx, idem.Message{ID: "order-17-created", Topic: "orders", OrderingKey: "order-17", Payload: []byte(`{"total":12}`)})
	if err != nil {
		log.Fatal(err)
	}

	src, err := idempubsub.NewSource(ctx, client, idempubsub.SourceConfig{Subscription: "billing"})
	if err != nil {
		log.Fatal(err)
	}
	defer src.Close()
	ds, err := src.Receive(ctx, 10)
	if err != nil {
		log.Fatal(err)
	}
	for _, d := range ds {
		fmt.Println(d.ID, d.Topic, d.OrderingKey, string(d.Payload)) // apply the effect, then:
		if err := d.Settler.Ack(ctx); err != nil {
			log.Fatal(err)
		}
	}
	// Output: order-17-created orders order-17 {"total":12}
}
