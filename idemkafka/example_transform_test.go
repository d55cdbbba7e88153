package idemkafka_test

import (
	"bytes"
	"context"
	"fmt"
	"log"
	"time"

	"github.com/idemhq/idem/idemkafka"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Turn each order into an invoice record, exactly once: the invoice and the
// order's consumed offset are committed in one Kafka transaction, so a consumer
// reading "invoices" with read_committed sees one invoice per order whatever
// crashes or rebalances the pipeline goes through.
func ExampleTransform() {
	kafka, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "orders", "invoices"))
	if err != nil {
		log.Fatal(err)
	}
	defer kafka.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	producer, err := kgo.NewClient(kgo.SeedBrokers(kafka.ListenAddrs()...))
	if err != nil {
		log.Fatal(err)
	}
	defer producer.Close()
	if err := producer.ProduceSync(ctx, &kgo.Record{Topic: "orders", Key: []byte("order-17"), Value: []byte("order-17 12 EUR")}).FirstErr(); err != nil {
		log.Fatal(err)
	}

	tf, err := idemkafka.NewTransform(idemkafka.TransformConfig{
		Brokers:         kafka.ListenAddrs(),
		Group:           "invoicing",
		Topics:          []string{"orders"},
		TransactionalID: "invoicing-pod-0", // unique per instance, stable across its restarts
	}, func(ctx context.Context, in *kgo.Record) ([]*kgo.Record, error) {
		invoice := bytes.Replace(in.Value, []byte("order"), []byte("invoice"), 1)
		return []*kgo.Record{{Topic: "invoices", Key: in.Key, Value: invoice}}, nil
	})
	if err != nil {
		log.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- tf.Run(runCtx) }()

	reader, err := kgo.NewClient(kgo.SeedBrokers(kafka.ListenAddrs()...), kgo.ConsumeTopics("invoices"),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		log.Fatal(err)
	}
	defer reader.Close()
	for {
		fetches := reader.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			log.Fatal(err)
		}
		if rs := fetches.Records(); len(rs) > 0 {
			fmt.Println(string(rs[0].Value))
			break
		}
	}
	stop()
	if err := <-done; err != nil {
		log.Fatal(err)
	}
	// Output: invoice-17 12 EUR
}
