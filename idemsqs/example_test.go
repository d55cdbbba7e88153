package idemsqs_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemsqs"
	"github.com/idemhq/idem/idemsqs/sqsfake"
)

// Publish an order event to a FIFO queue twice (as an outbox relay retrying would),
// then receive it once: SQS dropped the second copy within its 5-minute window.
// With AWS, build the client with config.LoadDefaultConfig and sqs.NewFromConfig;
// here an in-process SQS stands in.
func Example() {
	srv, err := sqsfake.Start(sqsfake.Config{})
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Close()
	client := srv.Client()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := idemsqs.EnsureQueue(ctx, client, "orders.fifo", idemsqs.QueueConfig{}); err != nil {
		log.Fatal(err)
	}

	sink, err := idemsqs.NewSink(client, idemsqs.SinkConfig{})
	if err != nil {
		log.Fatal(err)
	}
	m := idem.Message{ID: "order-17-placed", Topic: "orders.fifo", OrderingKey: "order-17", Payload: []byte(`{"order":17}`)}
	for range 2 {
		if err := sink.Publish(ctx, m); err != nil {
			log.Fatal(err) // publish again: SQS and the consumer's inbox dedup by ID
		}
	}

	src, err := idemsqs.NewSource(ctx, client, idemsqs.SourceConfig{Queue: "orders.fifo"})
	if err != nil {
		log.Fatal(err)
	}
	defer src.Close()
	ds, err := src.Receive(ctx, 10)
	if err != nil {
		log.Fatal(err)
	}
	for _, d := range ds {
		fmt.Println(d.ID, d.OrderingKey, d.Attempt, string(d.Payload)) // apply the effect, then:
		if err := d.Settler.Ack(ctx); err != nil {
			log.Fatal(err)
		}
	}
	// Output:
	// order-17-placed order-17 1 {"order":17}
}
