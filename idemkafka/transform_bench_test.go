package idemkafka_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemkafka"
	"github.com/twmb/franz-go/pkg/kgo"
)

// BenchmarkTransform measures the read-process-write transaction on kfake against
// the inbox on the same kfake writing to Postgres, in one run. "transaction" moves
// b.N records published beforehand (untimed) from one topic to another, one
// transaction per batch of 64, with one worker; "inbox-pg" is inboxtest.Bench on
// this package's Source: the idempotent consumer (and a plain at-least-once
// consumer) inserting one row per message, unbatched and in batches of 64. Compare
// transaction/batch=64 with inbox-pg/inbox/batch=64.
func BenchmarkTransform(b *testing.B) {
	b.Run("transaction/batch=64", benchTransaction)
	b.Run("inbox-pg", BenchmarkInbox)
}

func benchTransaction(b *testing.B) {
	e := newTxEnv(b)
	payload := make([]byte, 100) // inboxtest.Bench's payload size
	for start := 0; start < b.N; start += 500 {
		var rs []*kgo.Record
		for i := start; i < min(start+500, b.N); i++ {
			rs = append(rs, &kgo.Record{Topic: e.in, Value: payload, Headers: []kgo.RecordHeader{{Key: idem.HeaderID, Value: fmt.Appendf(nil, "%d", i)}}})
		}
		if err := e.producer.ProduceSync(context.Background(), rs...).FirstErr(); err != nil {
			b.Fatal(err)
		}
	}
	cfg := e.config("bench", 1)
	cfg.MaxBatch = 64
	tf, err := idemkafka.NewTransform(cfg, func(_ context.Context, in *kgo.Record) ([]*kgo.Record, error) {
		return []*kgo.Record{{Topic: e.out, Key: in.Key, Value: in.Value, Headers: in.Headers}}, nil
	})
	if err != nil {
		b.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	b.ResetTimer()
	start := time.Now()
	go func() { errc <- tf.Run(ctx) }()
	for tf.Committed() < int64(b.N) {
		select {
		case err := <-errc:
			b.Fatalf("Run stopped after %d of %d records: %v", tf.Committed(), b.N, err)
		case <-time.After(time.Millisecond):
		}
	}
	elapsed := time.Since(start)
	b.StopTimer()
	stop()
	if err := <-errc; err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "msgs/s")
}
