package peers_test

import (
	"context"
	stdsql "database/sql"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wmsql "github.com/ThreeDotsLabs/watermill-sql/v3/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/message"
	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx", for watermill-sql
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemnats"
	"github.com/idemhq/idem/inbox/inboxtest"
	"github.com/idemhq/idem/internal/testsvc"
)

// BenchmarkPeers measures, in one run and on the same Postgres, idem's inbox beside
// a peer that also claims exactly-once effects: watermill-sql's subscriber with the
// handler writing in the subscriber's own transaction (sql.TxFromContext), so the
// write and the consumer-group offset commit together.
//
// Every sub-benchmark consumes b.N messages published beforehand (untimed) and
// reports msgs/s from the start of consumption until all b.N are committed.
//
//	watermill-sql/exactly-once/batch=K  watermill-sql v3, Postgres as the broker,
//	                                    K messages per subscriber transaction
//	                                    (SubscribeBatchSize; 100 is its default)
//	idem/nats/plain/batch=K             at-least-once baseline: JetStream, INSERT, commit, ack
//	idem/nats/inbox/batch=K             idem's inbox: JetStream (SourceConfig.Prefetch), claim+INSERT+complete, commit, ack
//	idem/nats/inbox/batch=64x2          the same, two consumers of one durable (a consumer group;
//	                                    watermill-sql's exactly-once subscriber has one offset per group)
//	idem/nats/inbox-batch/batch=64      idem/nats/inbox/batch=64 with inbox.NewBatch: one multi-row
//	                                    INSERT per batch instead of one INSERT per message
//	idem/dbqueue/inbox/batch=K[x2]      Postgres as the broker on idem's side too: queue.Source
//	                                    (Prefetch), the inbox retiring each row in its effect's transaction
//	idem/dbqueue/inbox-batch/batch=64   the same with inbox.NewBatch: INSERT … SELECT FROM unnest per batch
func BenchmarkPeers(b *testing.B) {
	b.Run("watermill-sql/exactly-once", benchWatermill)
	b.Run("idem/nats", benchIdemNATS)
	for _, batch := range []int{1, 64} {
		b.Run(fmt.Sprintf("idem/dbqueue/inbox/batch=%d", batch), func(b *testing.B) { benchIdemDBQueue(b, batch, 1, false) })
	}
	b.Run("idem/dbqueue/inbox/batch=64x2", func(b *testing.B) { benchIdemDBQueue(b, 64, 2, false) })
	b.Run("idem/dbqueue/inbox-batch/batch=64", func(b *testing.B) { benchIdemDBQueue(b, 64, 1, true) })
}

// ---- idem: the repository's own harness (inboxtest.Bench) on JetStream ----

func benchIdemNATS(b *testing.B) {
	js := connectNATS(b)
	inboxtest.Bench(b, func(b *testing.B) inboxtest.BenchEnv {
		prefix := testsvc.UniqueName("idempeers.")
		stream := jsStream(b, js, "IDEMPEERS_", prefix+".>")
		sink, err := idemnats.NewSink(js, idemnats.SinkConfig{})
		if err != nil {
			b.Fatalf("NewSink: %v", err)
		}
		return inboxtest.BenchEnv{Topic: prefix + ".orders", Sink: sink, NewSource: func() (idem.Source, error) {
			return idemnats.NewSource(context.Background(), js, idemnats.SourceConfig{Stream: stream, Durable: "bench", Prefetch: true})
		}}
	})
}

func natsURL() string {
	if u := os.Getenv("IDEM_TEST_NATS_URL"); u != "" {
		return u
	}
	return "nats://127.0.0.1:4222"
}

func connectNATS(b *testing.B) jetstream.JetStream {
	b.Helper()
	u, err := url.Parse(natsURL())
	if err != nil {
		b.Fatalf("IDEM_TEST_NATS_URL=%q: %v", natsURL(), err)
	}
	testsvc.Reach(b, "nats", u.Host)
	nc, err := nats.Connect(natsURL())
	if err != nil {
		b.Fatalf("connect to %s: %v", natsURL(), err)
	}
	b.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		b.Fatal(err)
	}
	return js
}

// ---- watermill-sql v3 in its exactly-once configuration ----

func benchWatermill(b *testing.B) {
	// A fresh schema (dropped when b ends) selected through search_path: watermill's
	// tables, its offsets and the ledger are all unqualified names inside it.
	db := schemaDB(b)
	for _, batch := range []int{1, 64, 100} {
		b.Run(fmt.Sprintf("batch=%d", batch), func(b *testing.B) { benchWatermillRun(b, db, batch) })
	}
}

// benchWatermillRun publishes b.N messages with watermill-sql's Publisher (untimed),
// then times its Subscriber until the ledger holds all b.N rows, committed.
func benchWatermillRun(b *testing.B, db *stdsql.DB, batch int) {
	ctx := context.Background()
	// A topic (hence messages and offsets tables) and a ledger of this call's own:
	// the benchmark function runs once per b.N.
	topic := testsvc.UniqueName("bench_")
	ledger := "ledger_" + topic
	if _, err := db.ExecContext(ctx, "CREATE TABLE "+ledger+" (msg_id TEXT NOT NULL, amount BIGINT NOT NULL)"); err != nil {
		b.Fatal(err)
	}
	insert := "INSERT INTO " + ledger + " (msg_id, amount) VALUES ($1, $2)"

	schema := wmsql.DefaultPostgreSQLSchema{
		// The payload is 100 opaque bytes, as in idem's harness; the default is JSON.
		GeneratePayloadType: func(string) string { return "BYTEA" },
		SubscribeBatchSize:  batch,
	}
	offsets := wmsql.DefaultPostgreSQLOffsetsAdapter{}
	logger := watermill.NopLogger{}

	pub, err := wmsql.NewPublisher(db, wmsql.PublisherConfig{SchemaAdapter: schema}, logger)
	if err != nil {
		b.Fatal(err)
	}
	defer pub.Close()
	sub, err := wmsql.NewSubscriber(db, wmsql.SubscriberConfig{
		ConsumerGroup:  "bench",
		PollInterval:   10 * time.Millisecond, // only used when a query finds nothing
		ResendInterval: 10 * time.Millisecond,
		SchemaAdapter:  schema,
		OffsetsAdapter: offsets,
	}, logger)
	if err != nil {
		b.Fatal(err)
	}
	defer sub.Close()
	if err := sub.SubscribeInitialize(topic); err != nil {
		b.Fatal(err)
	}

	payload := make([]byte, 100)
	for start := 0; start < b.N; start += 500 {
		msgs := make(message.Messages, 0, 500)
		for i := start; i < min(start+500, b.N); i++ {
			msgs = append(msgs, message.NewMessage("m-"+strconv.Itoa(i), payload)) // uuid column is VARCHAR(36)
		}
		if err := pub.Publish(topic, msgs...); err != nil {
			b.Fatal(err)
		}
	}

	b.ResetTimer()
	start := time.Now()
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	ch, err := sub.Subscribe(runCtx, topic)
	if err != nil {
		b.Fatal(err)
	}
	var handled atomic.Int64
	errc := make(chan error, 1)
	go func() {
		for msg := range ch {
			// The exactly-once mode: the subscriber's transaction, in which it read
			// the message and will write the consumer group's offset, is in the
			// message's context; Ack lets the subscriber move on, and the offset
			// UPSERT and COMMIT follow after the batch's last message.
			tx, ok := wmsql.TxFromContext(msg.Context())
			if !ok {
				errc <- fmt.Errorf("message %s: no transaction in its context", msg.UUID)
				return
			}
			if _, err := tx.ExecContext(msg.Context(), insert, msg.UUID, len(msg.Payload)); err != nil {
				errc <- fmt.Errorf("message %s: %w", msg.UUID, err)
				return
			}
			msg.Ack()
			handled.Add(1)
		}
	}()
	// Handed-over is not committed: wait for the handler to see all b.N, then for the
	// last transaction's commit (the ledger's rows become visible with it).
	for handled.Load() < int64(b.N) {
		select {
		case err := <-errc:
			b.Fatalf("handler stopped after %d of %d: %v", handled.Load(), b.N, err)
		case <-time.After(time.Millisecond):
		}
	}
	for committed(b, db, ledger) < b.N {
		select {
		case err := <-errc:
			b.Fatalf("handler stopped: %v", err)
		case <-time.After(time.Millisecond):
		}
	}
	elapsed := time.Since(start)
	b.StopTimer()
	stop()
	sub.Close()

	// Exactly once: every message in the ledger, none twice.
	var rows, distinct int
	if err := db.QueryRowContext(ctx, "SELECT count(*), count(DISTINCT msg_id) FROM "+ledger).Scan(&rows, &distinct); err != nil {
		b.Fatal(err)
	}
	if rows != b.N || distinct != b.N {
		b.Fatalf("ledger: %d rows, %d distinct, want %d", rows, distinct, b.N)
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "msgs/s")
}

func committed(b *testing.B, db *stdsql.DB, ledger string) int {
	var n int
	if err := db.QueryRow("SELECT count(*) FROM " + ledger).Scan(&n); err != nil {
		b.Fatal(err)
	}
	return n
}
