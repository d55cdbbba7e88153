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

// Dedup forever: each message goes to its own subject, orders.created.<id>, on a
// stream that keeps one message per subject, so JetStream refuses a republish of
// an ID however late it comes, not only within the duplicate window.
func ExampleSinkConfig_dedupForever() {
	dir, err := os.MkdirTemp("", "idemnats-forever")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	srv, err := natsserver.StartServer(natsserver.ServerConfig{Dir: dir})
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Shutdown()
	nc, err := srv.Connect()
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	_, err = idemnats.EnsureStream(ctx, js, idemnats.StreamConfig{Name: "ORDERS", Subjects: []string{"orders.>"},
		Dedup: idemnats.DedupForever})
	if err != nil {
		log.Fatal(err)
	}
	sink, err := idemnats.NewSink(js, idemnats.SinkConfig{Dedup: idemnats.DedupForever})
	if err != nil {
		log.Fatal(err)
	}
	m := idem.Message{ID: "order-17", Topic: "orders.created", Payload: []byte(`{"total":42}`)}
	for range 2 {
		dup, err := sink.PublishOne(ctx, m)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(idemnats.IDSubject(m.Topic, m.ID), "duplicate:", dup)
	}
	// Output:
	// orders.created.order-17 duplicate: false
	// orders.created.order-17 duplicate: true
}
