package idemnats_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemnats"
	"github.com/idemhq/idem/idemnats/natsserver"
	"github.com/idemhq/idem/idemtest"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// benchBatch is how many messages one Publish call carries and one Receive asks
// for: an outbox relay's and an inbox's usual batch.
const benchBatch = 100

var benchPayload = []byte(`{"order":"o-123456","total":4200,"currency":"EUR"}`)

// benchServers runs body against the test NATS over TCP and an embedded server
// connected in process: as StartServer runs it (syncing each write before its
// ack), and with nats-server's default periodic sync (embedded-interval), so one
// run shows what an ack that means stored costs.
func benchServers(b *testing.B, body func(b *testing.B, js jetstream.JetStream)) {
	b.Run("server=tcp", func(b *testing.B) {
		_, js := connect(b)
		body(b, js)
	})
	b.Run("server=embedded", func(b *testing.B) {
		_, js := embeddedJS(b)
		body(b, js)
	})
	b.Run("server=embedded-interval", func(b *testing.B) {
		_, js := embeddedJSWith(b, natsserver.ServerConfig{SyncInterval: 2 * time.Minute})
		body(b, js)
	})
}

func benchMsgs(prefix string, n int) []idem.Message {
	msgs := make([]idem.Message, n)
	for i := range msgs {
		msgs[i] = idem.Message{ID: fmt.Sprintf("m-%09d", i), Topic: prefix + ".orders", Payload: benchPayload}
	}
	return msgs
}

func reportRate(b *testing.B, start time.Time) {
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "msgs/s")
}

// BenchmarkFlow publishes N messages in batches, then receives and acks (double
// ack) all of them: with the adapter, and with the same calls made on nats.go's
// jetstream package directly (the baseline).
func BenchmarkFlow(b *testing.B) {
	benchServers(b, func(b *testing.B, js jetstream.JetStream) {
		b.Run("impl=idemnats", func(b *testing.B) {
			stream, prefix := newStream(b, js)
			sink := newSink(b, js, idemnats.SinkConfig{})
			src := openSource(b, js, idemnats.SourceConfig{Stream: stream, Durable: "bench", AckWait: time.Minute})
			msgs := benchMsgs(prefix, b.N)
			ctx := context.Background()
			b.ResetTimer()
			start := time.Now()
			for i := 0; i < b.N; i += benchBatch {
				if err := sink.Publish(ctx, msgs[i:min(i+benchBatch, b.N)]...); err != nil {
					b.Fatal(err)
				}
			}
			idemtest.ReceiveAck(b, src, b.N, benchBatch)
			reportRate(b, start)
		})
		b.Run("impl=raw", func(b *testing.B) {
			stream, prefix := newStream(b, js)
			ctx := context.Background()
			cons, err := js.CreateOrUpdateConsumer(ctx, stream, jetstream.ConsumerConfig{
				Durable: "bench", AckPolicy: jetstream.AckExplicitPolicy, AckWait: time.Minute, MaxDeliver: -1})
			if err != nil {
				b.Fatal(err)
			}
			msgs := benchMsgs(prefix, b.N)
			b.ResetTimer()
			start := time.Now()
			for i := 0; i < b.N; i += benchBatch {
				for _, m := range msgs[i:min(i+benchBatch, b.N)] {
					nm := &nats.Msg{Subject: m.Topic, Header: nats.Header{jetstream.MsgIDHeader: {m.ID}}, Data: m.Payload}
					if _, err := js.PublishMsgAsync(nm); err != nil {
						b.Fatal(err)
					}
				}
				<-js.PublishAsyncComplete()
			}
			for got := 0; got < b.N; {
				batch, err := cons.Fetch(min(benchBatch, b.N-got), jetstream.FetchMaxWait(5*time.Second))
				if err != nil {
					b.Fatal(err)
				}
				for m := range batch.Messages() {
					if err := m.DoubleAck(ctx); err != nil {
						b.Fatal(err)
					}
					got++
				}
				if err := batch.Error(); err != nil {
					b.Fatal(err)
				}
			}
			reportRate(b, start)
		})
	})
}

// BenchmarkPublish measures publishing alone, in batches of benchBatch: the sink
// pipelined (its default) and one at a time (MaxInFlight 1), beside nats.go's
// synchronous and asynchronous publish.
func BenchmarkPublish(b *testing.B) {
	benchServers(b, func(b *testing.B, js jetstream.JetStream) {
		ctx := context.Background()
		for _, inFlight := range []int{idemnats.DefaultMaxInFlight, 1} {
			b.Run(fmt.Sprintf("impl=idemnats/MaxInFlight=%d", inFlight), func(b *testing.B) {
				_, prefix := newStream(b, js)
				sink := newSink(b, js, idemnats.SinkConfig{MaxInFlight: inFlight})
				msgs := benchMsgs(prefix, b.N)
				b.ResetTimer()
				start := time.Now()
				for i := 0; i < b.N; i += benchBatch {
					if err := sink.Publish(ctx, msgs[i:min(i+benchBatch, b.N)]...); err != nil {
						b.Fatal(err)
					}
				}
				reportRate(b, start)
			})
		}
		for _, async := range []bool{true, false} {
			b.Run(fmt.Sprintf("impl=raw/async=%v", async), func(b *testing.B) {
				_, prefix := newStream(b, js)
				msgs := benchMsgs(prefix, b.N)
				b.ResetTimer()
				start := time.Now()
				for i, m := range msgs {
					nm := &nats.Msg{Subject: m.Topic, Header: nats.Header{jetstream.MsgIDHeader: {m.ID}}, Data: m.Payload}
					var err error
					if async {
						_, err = js.PublishMsgAsync(nm)
						if (i+1)%benchBatch == 0 || i == len(msgs)-1 {
							<-js.PublishAsyncComplete()
						}
					} else {
						_, err = js.PublishMsg(ctx, nm)
					}
					if err != nil {
						b.Fatal(err)
					}
				}
				reportRate(b, start)
			})
		}
	})
}
