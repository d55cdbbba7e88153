package idemkafka_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemkafka"
	"github.com/idemhq/idem/idemtest"
	"github.com/twmb/franz-go/pkg/kgo"
)

// benchBatch is how many messages one Publish (or ProduceSync) carries and one
// Receive (or PollRecords) asks for.
const benchBatch = 100

// benchPayload is a small JSON event, the size of a typical outbox message.
var benchPayload = []byte(`{"order":"order-0000000017","customer":"customer-42","total_cents":1299,"currency":"EUR"}`)

// BenchmarkPublishReceiveAck moves b.N messages through kfake: publish them all in
// batches, then receive and acknowledge them all as one group member. "adapter" goes
// through Sink and Source (offsets committed every second and on Close); "raw-kgo"
// is the baseline measured in the same run: franz-go's idempotent ProduceSync, then
// PollRecords with a commit of the polled offsets every second and at the end.
func BenchmarkPublishReceiveAck(b *testing.B) {
	b.Run("adapter", benchAdapter)
	b.Run("raw-kgo", benchRaw)
}

func benchAdapter(b *testing.B) {
	f := setup(b, 3)
	src := newSourceConfig(b, idemkafka.SourceConfig{Brokers: f.c.ListenAddrs(), Group: f.group, Topics: []string{f.topic}, Options: fastGroup()})
	ctx := context.Background()
	f.publish(b, benchMsg(f.topic, -1)) // joins the group before the clock starts
	ack(b, receiveN(b, src, 1)...)

	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	batch := make([]idem.Message, 0, benchBatch)
	for i := 0; i < b.N; i++ {
		batch = append(batch, benchMsg(f.topic, i))
		if len(batch) == benchBatch || i == b.N-1 {
			if err := f.sink.Publish(ctx, batch...); err != nil {
				b.Fatal(err)
			}
			batch = batch[:0]
		}
	}
	published := time.Now()
	idemtest.ReceiveAck(b, src, b.N, benchBatch)
	if err := src.Close(); err != nil { // the final commit is part of the work
		b.Fatal(err)
	}
	reportPhases(b, start, published)
}

func benchRaw(b *testing.B) {
	f := setup(b, 3)
	ctx := context.Background()
	producer, err := kgo.NewClient(kgo.SeedBrokers(f.c.ListenAddrs()...), kgo.ProducerLinger(0))
	if err != nil {
		b.Fatal(err)
	}
	defer producer.Close()
	consumer, err := kgo.NewClient(append(fastGroup(), kgo.SeedBrokers(f.c.ListenAddrs()...),
		kgo.ConsumerGroup(f.group), kgo.ConsumeTopics(f.topic), kgo.DisableAutoCommit())...)
	if err != nil {
		b.Fatal(err)
	}
	defer consumer.Close()
	if err := producer.ProduceSync(ctx, rawRecord(f.topic, -1)).FirstErr(); err != nil {
		b.Fatal(err)
	}
	for got := 0; got < 1; { // joins the group before the clock starts
		got += len(consumer.PollRecords(ctx, 1).Records())
	}

	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	batch := make([]*kgo.Record, 0, benchBatch)
	for i := 0; i < b.N; i++ {
		batch = append(batch, rawRecord(f.topic, i))
		if len(batch) == benchBatch || i == b.N-1 {
			if err := producer.ProduceSync(ctx, batch...).FirstErr(); err != nil {
				b.Fatal(err)
			}
			batch = batch[:0]
		}
	}
	published := time.Now()
	lastCommit := time.Now()
	for n := 0; n < b.N; {
		fetches := consumer.PollRecords(ctx, benchBatch)
		if err := fetches.Err0(); err != nil {
			b.Fatal(err)
		}
		n += fetches.NumRecords()
		if time.Since(lastCommit) >= idemkafka.DefaultCommitInterval {
			if err := consumer.CommitUncommittedOffsets(ctx); err != nil {
				b.Fatal(err)
			}
			lastCommit = time.Now()
		}
	}
	if err := consumer.CommitUncommittedOffsets(ctx); err != nil {
		b.Fatal(err)
	}
	reportPhases(b, start, published)
}

// reportPhases reports the whole round (msgs/s) and each half: publishing
// (pub-msgs/s) and receiving with acknowledgements and commits (recv-msgs/s).
func reportPhases(b *testing.B, start, published time.Time) {
	end := time.Now()
	n := float64(b.N)
	b.ReportMetric(n/end.Sub(start).Seconds(), "msgs/s")
	b.ReportMetric(n/published.Sub(start).Seconds(), "pub-msgs/s")
	b.ReportMetric(n/end.Sub(published).Seconds(), "recv-msgs/s")
}

func benchMsg(topic string, i int) idem.Message {
	return idem.Message{ID: fmt.Sprintf("bench-%09d", i), Topic: topic, OrderingKey: fmt.Sprintf("order-%d", i%64),
		Headers: map[string]string{"type": "order.created"}, Payload: benchPayload}
}

// rawRecord is benchMsg as the adapter would write it.
func rawRecord(topic string, i int) *kgo.Record {
	return &kgo.Record{Topic: topic, Key: fmt.Appendf(nil, "order-%d", i%64), Value: benchPayload,
		Headers: []kgo.RecordHeader{{Key: idem.HeaderID, Value: fmt.Appendf(nil, "bench-%09d", i)}, {Key: "type", Value: []byte("order.created")}}}
}
