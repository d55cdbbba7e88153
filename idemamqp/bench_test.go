package idemamqp_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemamqp"
	"github.com/idemhq/idem/idemtest"
	amqp "github.com/rabbitmq/amqp091-go"
)

// benchN messages go through the broker per benchmark iteration: published as one
// batch with confirms, then received and acknowledged one by one.
const benchN = 1000

// BenchmarkPublishReceiveAck moves benchN messages through a queue per iteration:
// through the adapter (Sink.Publish, Source.Receive, Settler.Ack), and, as the
// baseline, through raw amqp091-go doing the same (a confirm-mode channel publishing
// persistent messages and waiting for every confirm; a consumer with manual acks and
// the same prefetch). Both run on classic and quorum queues.
func BenchmarkPublishReceiveAck(b *testing.B) {
	for _, quorum := range []bool{false, true} {
		kind := "classic"
		if quorum {
			kind = "quorum"
		}
		b.Run(kind+"/adapter", func(b *testing.B) { benchAdapter(b, quorum) })
		b.Run(kind+"/raw", func(b *testing.B) { benchRaw(b, quorum) })
	}
}

func benchMessages(queue string) []idem.Message {
	msgs := make([]idem.Message, benchN)
	for i := range msgs {
		msgs[i] = idem.Message{ID: fmt.Sprintf("bench-%06d", i), Topic: queue,
			Headers: map[string]string{"type": "order.placed"}, Payload: []byte(fmt.Sprintf(`{"order":%d,"total":"19.99"}`, i))}
	}
	return msgs
}

func reportRate(b *testing.B) {
	b.ReportMetric(float64(b.N*benchN)/b.Elapsed().Seconds(), "msgs/s")
}

func benchAdapter(b *testing.B, quorum bool) {
	conn := dial(b)
	queue := declareQueue(b, idemamqp.QueueConfig{Quorum: quorum})
	sink := newSink(b, conn, idemamqp.SinkConfig{Mandatory: true})
	src := newSource(b, conn, idemamqp.SourceConfig{Queue: queue, Quorum: quorum})
	msgs := benchMessages(queue)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if err := sink.Publish(ctx, msgs...); err != nil {
			b.Fatal(err)
		}
		idemtest.ReceiveAck(b, src, benchN, benchN)
	}
	reportRate(b)
}

func benchRaw(b *testing.B, quorum bool) {
	conn := dial(b)
	queue := declareQueue(b, idemamqp.QueueConfig{Quorum: quorum})
	pub, err := conn.Channel()
	if err != nil {
		b.Fatal(err)
	}
	if err := pub.Confirm(false); err != nil {
		b.Fatal(err)
	}
	sub, err := conn.Channel()
	if err != nil {
		b.Fatal(err)
	}
	if err := sub.Qos(idemamqp.DefaultPrefetch, 0, false); err != nil {
		b.Fatal(err)
	}
	deliveries, err := sub.Consume(queue, "", false, false, false, false, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = sub.Close(); _ = pub.Close() })
	msgs := benchMessages(queue)
	ctx := context.Background()
	confirms := make([]*amqp.DeferredConfirmation, benchN)
	b.ReportAllocs()
	for b.Loop() {
		for i, m := range msgs {
			p := amqp.Publishing{MessageId: m.ID, Headers: amqp.Table{"type": m.Headers["type"]}, DeliveryMode: amqp.Persistent, Body: m.Payload}
			if confirms[i], err = pub.PublishWithDeferredConfirmWithContext(ctx, "", queue, true, false, p); err != nil {
				b.Fatal(err)
			}
		}
		for _, dc := range confirms {
			if ok, err := dc.WaitContext(ctx); err != nil || !ok {
				b.Fatalf("confirm: %v %v", ok, err)
			}
		}
		for range benchN {
			d, ok := <-deliveries
			if !ok {
				b.Fatal("consumer closed")
			}
			if err := d.Ack(false); err != nil {
				b.Fatal(err)
			}
		}
	}
	reportRate(b)
}
