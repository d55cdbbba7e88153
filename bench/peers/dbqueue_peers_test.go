package peers_test

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/inbox"
	"github.com/idemhq/idem/inbox/inboxtest"
	"github.com/idemhq/idem/internal/testsvc"
	"github.com/idemhq/idem/queue"
)

// benchIdemDBQueue is BenchmarkPeers' like-for-like idem row: Postgres as the broker
// on both sides. b.N messages are enqueued beforehand (queue.EnqueueTx, untimed);
// then consumers inbox consumers, each on a queue.Source (Prefetch), apply them, each batch's
// ledger INSERTs, keys and the retirement of its queue rows in one transaction, and
// the time runs until all b.N are applied, as watermill's runs until its ledger holds
// all b.N.
//
// With batchHandler the consumers are inbox.NewBatch's, writing each batch's
// ledger rows in one INSERT … SELECT FROM unnest.
func benchIdemDBQueue(b *testing.B, batch, consumers int, batchHandler bool) {
	ctx := context.Background()
	cs, _ := testsvc.PostgresSchema(b)
	pool, err := pgxpool.New(ctx, cs)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(pool.Close)
	if _, err := pool.Exec(ctx, "CREATE TABLE ledger (msg_id TEXT NOT NULL, amount BIGINT NOT NULL)"); err != nil {
		b.Fatal(err)
	}
	db, q, store := dbQueueOn(b, ctx, pool)
	quiet := slog.New(slog.DiscardHandler)
	topic := "orders"
	payload := make([]byte, 100)
	for start := 0; start < b.N; start += 500 {
		msgs := make([]idem.Message, 0, 500)
		for i := start; i < min(start+500, b.N); i++ {
			msgs = append(msgs, idem.Message{ID: "order-" + strconv.Itoa(i), Topic: topic, Payload: payload})
		}
		if err := db.InTx(ctx, func(tx pgx.Tx) error { _, err := q.EnqueueTx(ctx, tx, msgs...); return err }); err != nil {
			b.Fatal(err)
		}
	}
	insert := func(ctx context.Context, tx pgx.Tx, m idem.Message) error {
		_, err := tx.Exec(ctx, "INSERT INTO ledger (msg_id, amount) VALUES ($1, $2)", m.ID, len(m.Payload))
		return err
	}
	insertAll := func(ctx context.Context, tx pgx.Tx, ms []idem.Message) error {
		ids, amounts := make([]string, len(ms)), make([]int64, len(ms))
		for i, m := range ms {
			ids[i], amounts[i] = m.ID, int64(len(m.Payload))
		}
		_, err := tx.Exec(ctx, "INSERT INTO ledger (msg_id, amount) SELECT * FROM unnest($1::text[], $2::bigint[])", ids, amounts)
		return err
	}
	var applied atomic.Int64
	runs := make([]func(context.Context) error, consumers)
	for i := range runs {
		src, err := q.Source(queue.SourceConfig{Topic: topic, Prefetch: true})
		if err != nil {
			b.Fatal(err)
		}
		defer src.Close()
		acked := ackedTxSource{src, func(int) { applied.Add(1) }}
		cfg := inbox.Config{Consumer: fmt.Sprintf("peers-%d", batch), BatchSize: batch, Logger: quiet}
		var c *inbox.Consumer[pgx.Tx]
		if batchHandler {
			c, err = inbox.NewBatch(ctx, acked, db, store, insertAll, cfg)
		} else {
			c, err = inbox.New(ctx, acked, db, store, insert, cfg)
		}
		if err != nil {
			b.Fatal(err)
		}
		runs[i] = c.Run
	}
	elapsed := inboxtest.TimeConsumers(b, applied.Load, runs...)
	var rows, distinct int
	if err := pool.QueryRow(ctx, "SELECT count(*), count(DISTINCT msg_id) FROM ledger").Scan(&rows, &distinct); err != nil {
		b.Fatal(err)
	}
	if rows != b.N || distinct != b.N {
		b.Fatalf("ledger: %d rows, %d distinct, want %d", rows, distinct, b.N)
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "msgs/s")
}
