package idemnats_test

import (
	"context"
	"fmt"
	"log/slog"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemnats"
	"github.com/idemhq/idem/idemnats/natsserver"
	"github.com/idemhq/idem/idempg"
	"github.com/idemhq/idem/inbox/inboxtest"
	"github.com/idemhq/idem/internal/testsvc"
	"github.com/idemhq/idem/outbox"
)

// benchTopologies runs body on an embedded single server (R1) and on an embedded
// 3-node cluster (R3), both over TCP from this process: the cost of replication,
// measured in one run.
func benchTopologies(b *testing.B, body func(b *testing.B, js jetstream.JetStream, replicas int)) {
	b.Run("nodes=1", func(b *testing.B) {
		srv, err := natsserver.StartServer(natsserver.ServerConfig{Dir: b.TempDir()})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(srv.Shutdown)
		body(b, tcpJS(b, srv.ClientURL()), 1)
	})
	b.Run("nodes=3", func(b *testing.B) {
		c, err := natsserver.StartCluster(context.Background(), natsserver.ClusterConfig{Dir: b.TempDir()})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(c.Shutdown)
		body(b, tcpJS(b, c.ClientURLs()), 3)
	})
}

func tcpJS(b *testing.B, urls string) jetstream.JetStream {
	nc, err := nats.Connect(urls)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(nc.Close)
	return jsOf(b, nc)
}

// replicatedStream creates a fresh stream with replicas copies.
func replicatedStream(b *testing.B, js jetstream.JetStream, replicas int) (stream, prefix string) {
	stream = fmt.Sprintf("BENCH_%d", b.N)
	prefix = "bench." + fmt.Sprint(b.N)
	if _, err := idemnats.EnsureStream(context.Background(), js, idemnats.StreamConfig{Name: stream, Subjects: []string{prefix + ".>"}, Replicas: replicas}); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = js.DeleteStream(context.Background(), stream) })
	return stream, prefix
}

// BenchmarkClusterInbox: inbox msgs/s per consumer (inboxtest.Bench on Postgres)
// on one node and on a 3-node cluster with an R3 stream.
func BenchmarkClusterInbox(b *testing.B) {
	benchTopologies(b, func(b *testing.B, js jetstream.JetStream, replicas int) {
		inboxtest.Bench(b, func(b *testing.B) inboxtest.BenchEnv {
			stream, prefix := replicatedStream(b, js, replicas)
			return inboxtest.BenchEnv{Topic: prefix + ".orders", Sink: newSink(b, js, idemnats.SinkConfig{}), NewSource: func() (idem.Source, error) {
				return idemnats.NewSource(context.Background(), js, idemnats.SourceConfig{Stream: stream, Durable: "bench"})
			}}
		})
	})
}

// BenchmarkClusterRelay: one outbox relay draining b.N committed messages from
// Postgres, on one node and on a 3-node cluster with an R3 stream.
func BenchmarkClusterRelay(b *testing.B) {
	ctx := context.Background()
	pool := testsvc.PostgresPool(b)
	ob, err := outbox.New(ctx, idempg.TxDB(pool), outbox.Config{})
	if err != nil {
		b.Fatal(err)
	}
	benchTopologies(b, func(b *testing.B, js jetstream.JetStream, replicas int) {
		_, prefix := replicatedStream(b, js, replicas)
		sink := newSink(b, js, idemnats.SinkConfig{})
		for start := 0; start < b.N; start += 500 {
			ms := make([]idem.Message, 0, 500)
			for i := start; i < min(start+500, b.N); i++ {
				ms = append(ms, idem.Message{ID: fmt.Sprintf("%s-%d-%d", prefix, replicas, i), Topic: prefix + ".orders", OrderingKey: fmt.Sprint(i % 100), Payload: make([]byte, 100)})
			}
			if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				_, err := ob.EnqueueTx(ctx, tx, ms...)
				return err
			}); err != nil {
				b.Fatal(err)
			}
		}
		r, err := ob.Relay(sink, outbox.RelayConfig{BatchSize: 500, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			b.Fatal(err)
		}
		b.ResetTimer()
		for done := 0; done < b.N; {
			n, err := r.RunOnce(ctx)
			if err != nil {
				b.Fatal(err)
			}
			done += n
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
	})
}
