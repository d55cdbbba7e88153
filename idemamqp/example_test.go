package idemamqp_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemamqp"
	amqp "github.com/rabbitmq/amqp091-go"
)

// Publish an order event with confirms, then receive it and acknowledge it once its
// effect is done. (No Output: it needs a RabbitMQ.)
func Example() {
	conn, err := amqp.Dial("amqp://guest:guest@localhost:5672/")
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	// A quorum queue: replicated, and counting deliveries for Delivery.Attempt.
	if err := idemamqp.EnsureQueue(context.Background(), conn, "orders", idemamqp.QueueConfig{Quorum: true}); err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// The default exchange routes a message to the queue its Topic names.
	sink, err := idemamqp.NewSink(conn, idemamqp.SinkConfig{Mandatory: true})
	if err != nil {
		log.Fatal(err)
	}
	defer sink.Close()
	err = sink.Publish(ctx, idem.Message{ID: "order-17-placed", Topic: "orders", Payload: []byte(`{"order":17}`)})
	if err != nil {
		log.Fatal(err) // not confirmed: publish again, consumers dedup by ID
	}

	src, err := idemamqp.NewSource(conn, idemamqp.SourceConfig{Queue: "orders", Quorum: true})
	if err != nil {
		log.Fatal(err)
	}
	defer src.Close()
	ds, err := src.Receive(ctx, 10)
	if err != nil {
		log.Fatal(err)
	}
	for _, d := range ds {
		fmt.Println(d.ID, d.Attempt, string(d.Payload)) // apply the effect, then:
		if err := d.Settler.Ack(ctx); err != nil {
			log.Fatal(err)
		}
	}
}
