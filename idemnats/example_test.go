package idemnats_test

import (
	"context"
	"fmt"
	"log"
	"os"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemnats"
	"github.com/idemhq/idem/idemnats/natsserver"
	"github.com/nats-io/nats.go/jetstream"
)

// The default setup: an embedded NATS server with JetStream, a stream with a dedup
// window, a sink (an outbox relay would use it) and a durable source (an inbox
// would read it). The relay publishes the same message twice, as after a crash;
// the stream keeps one.
func Example() {
	dir, err := os.MkdirTemp("", "idemnats-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	srv, err := natsserver.StartServer(natsserver.ServerConfig{Dir: dir})
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Shutdown()
	nc, err := srv.Connect() // or nats.Connect(srv.ClientURL()) from elsewhere
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	if _, err := idemnats.EnsureStream(ctx, js, idemnats.StreamConfig{Name: "ORDERS", Subjects: []string{"orders.>"}}); err != nil {
		log.Fatal(err)
	}

	sink, err := idemnats.NewSink(js, idemnats.SinkConfig{})
	if err != nil {
		log.Fatal(err)
	}
	m := idem.Message{ID: "order-17", Topic: "orders.created", Payload: []byte(`{"total":42}`)}
	for range 2 {
		if err := sink.Publish(ctx, m); err != nil {
			log.Fatal(err)
		}
	}

	src, err := idemnats.NewSource(ctx, js, idemnats.SourceConfig{Stream: "ORDERS", Durable: "billing"})
	if err != nil {
		log.Fatal(err)
	}
	defer src.Close()
	ds, err := src.Receive(ctx, 10)
	if err != nil {
		log.Fatal(err)
	}
	for _, d := range ds {
		fmt.Println(d.ID, d.Topic, string(d.Payload), "attempt", d.Attempt, d.Position)
		if err := d.Settler.Ack(ctx); err != nil { // after the effect committed
			log.Fatal(err)
		}
	}
	// Output:
	// order-17 orders.created {"total":42} attempt 1 stream seq 1
}
