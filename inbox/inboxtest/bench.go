package inboxtest

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemmysql"
	"github.com/idemhq/idem/idempg"
	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/inbox"
	"github.com/idemhq/idem/internal/testsvc"
)

// BenchEnv is a fresh destination for one benchmark: a sink to fill it and a way to
// open a source on it.
type BenchEnv struct {
	Topic     string
	Sink      idem.Sink
	NewSource func() (idem.Source, error)
}

// Bench measures, on PostgreSQL, the idempotent consumer against a plain
// at-least-once consumer doing the same INSERT without dedup, both unbatched and with
// batches of 64, and the consumer with a BatchHandler (one INSERT per batch), on the
// broker of newEnv. Each sub-benchmark consumes b.N messages
// published beforehand (untimed) and reports msgs/s; compare the figures of one run.
func Bench(b *testing.B, newEnv func(b *testing.B) BenchEnv) {
	pool := testsvc.PostgresPool(b)
	store, err := idempg.New(context.Background(), pool, idempg.Config{})
	if err != nil {
		b.Fatal(err)
	}
	benchDB(b, newEnv, idempg.TxDB(pool), store)
}

// BenchMySQL is Bench on MySQL/MariaDB, with idemmysql as the store.
func BenchMySQL(b *testing.B, newEnv func(b *testing.B) BenchEnv) {
	db := testsvc.MySQLDB(b)
	store, err := idemmysql.New(context.Background(), db, idemmysql.Config{})
	if err != nil {
		b.Fatal(err)
	}
	benchDB(b, newEnv, idemmysql.TxDB(db), store)
}

func benchDB[Tx any](b *testing.B, newEnv func(b *testing.B) BenchEnv, db idemsql.TxDB[Tx], store idem.TxStore[Tx]) {
	ctx := context.Background()
	if err := db.InTx(ctx, func(tx Tx) error {
		_, err := db.Querier(tx).Exec(ctx, "CREATE TABLE ledger (msg_id VARCHAR(255) NOT NULL, amount BIGINT NOT NULL)")
		return err
	}); err != nil {
		b.Fatal(err)
	}
	insert := func(ctx context.Context, tx Tx, m idem.Message) error {
		_, err := db.Querier(tx).Exec(ctx, "INSERT INTO ledger (msg_id, amount) VALUES ($1, $2)", m.ID, len(m.Payload))
		return err
	}
	for _, batch := range []int{1, 64} {
		b.Run(fmt.Sprintf("plain/batch=%d", batch), func(b *testing.B) {
			benchConsume(b, newEnv(b), 1, func(src idem.Source, acks *atomic.Int64) func(context.Context) error {
				return func(ctx context.Context) error { return plainConsumer(ctx, db, insert, src, batch) }
			})
		})
		b.Run(fmt.Sprintf("inbox/batch=%d", batch), func(b *testing.B) {
			benchConsume(b, newEnv(b), 1, inboxConsumer(b, db, store, insert, batch))
		})
	}
	// The same inbox with a BatchHandler: each batch's fresh messages in one
	// multi-row INSERT instead of one INSERT each.
	b.Run("inbox-batch/batch=64", func(b *testing.B) {
		benchConsume(b, newEnv(b), 1, inboxBatchConsumer(b, db, store, 64))
	})
	// Two consumers of one durable: what a consumer group gives that one offset per
	// group (watermill-sql's exactly-once subscriber) cannot.
	b.Run("inbox/batch=64x2", func(b *testing.B) {
		benchConsume(b, newEnv(b), 2, inboxConsumer(b, db, store, insert, 64))
	})
}

// inboxConsumer returns the idempotent consumer of the benchmarks, on any source.
func inboxConsumer[Tx any](b *testing.B, db idemsql.TxDB[Tx], store idem.TxStore[Tx], insert func(context.Context, Tx, idem.Message) error, batch int) func(idem.Source, *atomic.Int64) func(context.Context) error {
	return func(src idem.Source, _ *atomic.Int64) func(context.Context) error {
		c, err := inbox.New(context.Background(), src, db, store, insert,
			inbox.Config{Consumer: fmt.Sprintf("bench-%d", batch), BatchSize: batch, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			b.Fatal(err)
		}
		return c.Run
	}
}

// inboxBatchConsumer is inboxConsumer with inbox.NewBatch and a handler writing a
// batch's ledger rows in one multi-row INSERT.
func inboxBatchConsumer[Tx any](b *testing.B, db idemsql.TxDB[Tx], store idem.TxStore[Tx], batch int) func(idem.Source, *atomic.Int64) func(context.Context) error {
	insertAll := func(ctx context.Context, tx Tx, ms []idem.Message) error {
		var q strings.Builder
		q.WriteString("INSERT INTO ledger (msg_id, amount) VALUES ")
		args := make([]any, 0, 2*len(ms))
		for i, m := range ms {
			if i > 0 {
				q.WriteString(", ")
			}
			fmt.Fprintf(&q, "($%d, $%d)", 2*i+1, 2*i+2)
			args = append(args, m.ID, len(m.Payload))
		}
		_, err := db.Querier(tx).Exec(ctx, q.String(), args...)
		return err
	}
	return func(src idem.Source, _ *atomic.Int64) func(context.Context) error {
		c, err := inbox.NewBatch(context.Background(), src, db, store, insertAll,
			inbox.Config{Consumer: fmt.Sprintf("bench-batch-%d", batch), BatchSize: batch, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			b.Fatal(err)
		}
		return c.Run
	}
}

// plainConsumer is the at-least-once baseline: each batch's inserts in one
// transaction, then the acks; a redelivery would insert again.
func plainConsumer[Tx any](ctx context.Context, db idemsql.TxDB[Tx], insert func(context.Context, Tx, idem.Message) error, src idem.Source, batch int) error {
	for {
		ds, err := src.Receive(ctx, batch)
		if err != nil {
			return err
		}
		err = db.InTx(ctx, func(tx Tx) error {
			for _, d := range ds {
				if err := insert(ctx, tx, d.Message); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
		for _, d := range ds {
			if err := d.Settler.Ack(ctx); err != nil {
				return err
			}
		}
	}
}

// benchConsume publishes b.N messages, then times n consumers, each on a source of
// its own, until they acked them all.
func benchConsume(b *testing.B, env BenchEnv, n int, consumer func(idem.Source, *atomic.Int64) func(context.Context) error) {
	ctx := context.Background()
	payload := make([]byte, 100)
	for start := 0; start < b.N; start += 500 {
		msgs := make([]idem.Message, 0, 500)
		for i := start; i < min(start+500, b.N); i++ {
			msgs = append(msgs, idem.Message{ID: fmt.Sprintf("%s-%d", env.Topic, i), Topic: env.Topic, Payload: payload})
		}
		if err := env.Sink.Publish(ctx, msgs...); err != nil {
			b.Fatal(err)
		}
	}
	var acks atomic.Int64
	runs := make([]func(context.Context) error, n)
	for i := range runs {
		src, err := env.NewSource()
		if err != nil {
			b.Fatal(err)
		}
		defer src.Close()
		runs[i] = consumer(countingSource{src, &acks}, &acks)
	}
	elapsed := TimeConsumers(b, acks.Load, runs...)
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "msgs/s")
}

// TimeConsumers resets b's timer, runs the consumers until done() reaches b.N (the
// messages acknowledged, or applied), stops them and returns the time it took; a
// consumer that stops before fails b.
func TimeConsumers(b *testing.B, done func() int64, runs ...func(context.Context) error) time.Duration {
	b.Helper()
	b.ResetTimer()
	runCtx, stop := context.WithCancel(context.Background())
	defer stop()
	errc := make(chan error, len(runs))
	start := time.Now()
	for _, run := range runs {
		go func() { errc <- run(runCtx) }()
	}
	for done() < int64(b.N) {
		select {
		case err := <-errc:
			b.Fatalf("a consumer stopped after %d of %d: %v", done(), b.N, err)
		case <-time.After(time.Millisecond):
		}
	}
	elapsed := time.Since(start)
	b.StopTimer()
	stop()
	for range runs {
		<-errc
	}
	return elapsed
}

type countingSource struct {
	idem.Source
	acks *atomic.Int64
}

func (s countingSource) Receive(ctx context.Context, max int) ([]idem.Delivery, error) {
	ds, err := s.Source.Receive(ctx, max)
	for i := range ds {
		ds[i].Settler = countingSettler{ds[i].Settler, s.acks}
	}
	return ds, err
}

type countingSettler struct {
	idem.Settler
	acks *atomic.Int64
}

func (c countingSettler) Ack(ctx context.Context) error {
	err := c.Settler.Ack(ctx)
	if err == nil {
		c.acks.Add(1)
	}
	return err
}
