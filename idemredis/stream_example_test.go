package idemredis_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemredis"
	"github.com/redis/go-redis/v9"
)

// Orders published to a Redis stream and consumed by the "billing" group: a message
// is acked once its effect is done, and comes back (to this or another replica) if
// it is not. (No Output: it needs a Redis.)
func ExampleStreamSource() {
	client := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	defer client.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	sink, err := idemredis.NewStreamSink(client, idemredis.StreamSinkConfig{MaxLen: 1_000_000})
	if err != nil {
		log.Fatal(err)
	}
	err = sink.Publish(ctx, idem.Message{ID: "order-17", Topic: "orders", Payload: []byte(`{"total":42}`)})
	if err != nil {
		log.Fatal(err)
	}

	src, err := idemredis.NewStreamSource(client, idemredis.StreamSourceConfig{Stream: "orders", Group: "billing"})
	if err != nil {
		log.Fatal(err)
	}
	defer src.Close()
	deliveries, err := src.Receive(ctx, 10)
	if err != nil {
		log.Fatal(err)
	}
	for _, d := range deliveries {
		fmt.Println(d.ID, string(d.Payload), "attempt", d.Attempt) // run the effect, keyed by d.ID
		if err := d.Settler.Ack(ctx); err != nil {
			log.Fatal(err)
		}
	}
}
