package idemkafka_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemkafka"
	"github.com/twmb/franz-go/pkg/kfake"
)

// Publish an order event and consume it in a consumer group: the record's offset is
// committed only after Ack, so a consumer crashing before then leaves it to be
// redelivered. An in-process cluster (kfake) stands in for Kafka here; in
// production, Brokers lists the real seed brokers.
func Example() {
	kafka, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, "orders"))
	if err != nil {
		log.Fatal(err)
	}
	defer kafka.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	sink, err := idemkafka.NewSink(idemkafka.SinkConfig{Brokers: kafka.ListenAddrs()})
	if err != nil {
		log.Fatal(err)
	}
	defer sink.Close()
	err = sink.Publish(ctx, idem.Message{ID: "order-17-created", Topic: "orders", OrderingKey: "order-17", Payload: []byte(`{"total":12}`)})
	if err != nil {
		log.Fatal(err)
	}

	src, err := idemkafka.NewSource(idemkafka.SourceConfig{Brokers: kafka.ListenAddrs(), Group: "billing", Topics: []string{"orders"}})
	if err != nil {
		log.Fatal(err)
	}
	defer src.Close()
	ds, err := src.Receive(ctx, 10)
	if err != nil {
		log.Fatal(err)
	}
	for _, d := range ds {
		fmt.Println(d.ID, string(d.Payload)) // apply the effect, then:
		if err := d.Settler.Ack(ctx); err != nil {
			log.Fatal(err)
		}
	}
	// Output: order-17-created {"total":12}
}
