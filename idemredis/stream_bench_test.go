package idemredis_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemredis"
	"github.com/idemhq/idem/idemtest"
	"github.com/redis/go-redis/v9"
)

// streamBenchBatch messages are published in one call, then received and acked one
// by one, per iteration.
const streamBenchBatch = 100

func streamBenchMessages(stream string) []idem.Message {
	msgs := make([]idem.Message, streamBenchBatch)
	for i := range msgs {
		msgs[i] = idem.Message{ID: fmt.Sprintf("order-%06d", i), Topic: stream, Payload: make([]byte, 100)}
	}
	return msgs
}

// BenchmarkStream publishes, receives and acks streamBenchBatch messages per
// iteration through the adapter, and the same with raw go-redis (pipelined XADD,
// XREADGROUP, one XACK per message) as the baseline, on one local Redis.
func BenchmarkStream(b *testing.B) {
	b.Run("adapter", func(b *testing.B) {
		bb := benchSetup(b)
		stream := bb.prefix + "stream"
		sink, err := idemredis.NewStreamSink(bb.client, idemredis.StreamSinkConfig{})
		if err != nil {
			b.Fatal(err)
		}
		src, err := idemredis.NewStreamSource(bb.client, idemredis.StreamSourceConfig{Stream: stream, Group: "g"})
		if err != nil {
			b.Fatal(err)
		}
		defer src.Close()
		msgs := streamBenchMessages(stream)
		ctx := context.Background()
		b.ReportAllocs()
		for b.Loop() {
			if err := sink.Publish(ctx, msgs...); err != nil {
				b.Fatal(err)
			}
			idemtest.ReceiveAck(b, src, len(msgs), len(msgs))
		}
		b.ReportMetric(float64(b.N*streamBenchBatch)/b.Elapsed().Seconds(), "msgs/s")
	})
	b.Run("raw-go-redis", func(b *testing.B) {
		bb := benchSetup(b)
		stream := bb.prefix + "stream"
		ctx := context.Background()
		if err := bb.client.XGroupCreateMkStream(ctx, stream, "g", "0").Err(); err != nil {
			b.Fatal(err)
		}
		msgs := streamBenchMessages(stream)
		b.ReportAllocs()
		for b.Loop() {
			pipe := bb.client.Pipeline()
			for _, m := range msgs {
				pipe.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: []any{"id", m.ID, "payload", m.Payload}})
			}
			if _, err := pipe.Exec(ctx); err != nil {
				b.Fatal(err)
			}
			for got := 0; got < len(msgs); {
				res, err := bb.client.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "g", Consumer: "c",
					Streams: []string{stream, ">"}, Count: int64(len(msgs) - got), Block: time.Second}).Result()
				if err != nil {
					b.Fatal(err)
				}
				for _, x := range res[0].Messages {
					if err := bb.client.XAck(ctx, stream, "g", x.ID).Err(); err != nil {
						b.Fatal(err)
					}
				}
				got += len(res[0].Messages)
			}
		}
		b.ReportMetric(float64(b.N*streamBenchBatch)/b.Elapsed().Seconds(), "msgs/s")
	})
}

// BenchmarkStreamSinkDedup publishes batches of streamBenchBatch new messages
// through a sink with StreamSinkConfig.Dedup (one script per message: the window's
// check, the XADD, the marker) and through one without (pipelined XADDs), the
// baseline; both trim the stream to about 10,000 entries.
func BenchmarkStreamSinkDedup(b *testing.B) {
	for _, tc := range []struct {
		name  string
		dedup time.Duration
	}{{"plain", 0}, {"dedup", 10 * time.Second}} {
		b.Run(tc.name, func(b *testing.B) {
			bb := benchSetup(b)
			stream := bb.prefix + "stream"
			sink, err := idemredis.NewStreamSink(bb.client, idemredis.StreamSinkConfig{MaxLen: 10_000, Dedup: tc.dedup})
			if err != nil {
				b.Fatal(err)
			}
			msgs := streamBenchMessages(stream)
			ctx := context.Background()
			n := 0
			b.ReportAllocs()
			for b.Loop() {
				for i := range msgs {
					msgs[i].ID = fmt.Sprintf("order-%09d", n)
					n++
				}
				if err := sink.Publish(ctx, msgs...); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N*streamBenchBatch)/b.Elapsed().Seconds(), "msgs/s")
		})
	}
}
