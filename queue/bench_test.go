package queue_test

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/inbox"
	"github.com/idemhq/idem/queue"
)

// BenchmarkQueue: b.N messages of 100 bytes through the database as the queue,
// enqueued one per transaction by benchProducers producers while one consumer
// takes them in batches of 64; msgs/s is b.N over the time from the first
// enqueue to the last retirement's commit.
//
//	idem        queue.EnqueueTx; an inbox consumer on a queue.Source of the same
//	            database (claim, then one transaction per batch: claim the keys,
//	            run the handler, complete the keys, retire the rows).
//	bare        the baseline without idem, same database, same producers: INSERT
//	            a row; the consumer claims with UPDATE … SKIP LOCKED (PostgreSQL;
//	            SQLite has one writer and takes no SKIP LOCKED) … RETURNING, then
//	            DELETEs the batch in a second transaction. No keys, no lease
//	            token, no ordering keys, no retention: what idem adds costs the
//	            difference.
//
//	go test -run '^$' -bench Queue -benchtime 5000x -count 3 ./queue
func BenchmarkQueue(b *testing.B) {
	for _, kind := range []string{"postgres", "sqlite"} {
		b.Run(kind+"/idem", func(b *testing.B) { benchIdem(b, kind) })
		b.Run(kind+"/bare", func(b *testing.B) { benchBare(b, kind) })
	}
}

const (
	benchProducers = 4
	benchBatch     = 64
)

var benchPayload = []byte(fmt.Sprintf("%0100d", 0))

// benchProduce runs one(i) for i in 1..n from benchProducers goroutines and
// waits until done reaches n.
func benchProduce(b *testing.B, n int, one func(i int) error, done *atomic.Int64) {
	b.Helper()
	b.ResetTimer()
	var next atomic.Int64
	errc := make(chan error, benchProducers)
	for range benchProducers {
		go func() {
			for i := int(next.Add(1)); i <= n; i = int(next.Add(1)) {
				if err := one(i); err != nil {
					errc <- err
					return
				}
			}
			errc <- nil
		}()
	}
	deadline := time.Now().Add(5 * time.Minute)
	for done.Load() < int64(n) {
		select {
		case err := <-errc:
			if err != nil {
				b.Fatal(err)
			}
		case <-time.After(time.Millisecond):
		}
		if time.Now().After(deadline) {
			b.Fatalf("%d of %d messages consumed after 5 minutes", done.Load(), n)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "msgs/s")
}

// benchConsumer starts an inbox consumer on a queue.Source of q (topic "bench",
// batches of benchBatch, a handler that does nothing) until ctx ends, and
// returns the count of the deliveries it acked; stop cancels ctx's consumer and
// waits for it.
func benchConsumer(b *testing.B, ctx context.Context, d *database, q *queue.Queue[*sql.Tx]) (done *atomic.Int64, stop func()) {
	b.Helper()
	ctx, cancel := context.WithCancel(ctx)
	src := newSource(b, q, queue.SourceConfig{Topic: "bench"})
	done = &atomic.Int64{}
	handle := func(context.Context, *sql.Tx, idem.Message) error { return nil }
	c, err := inbox.New(ctx, countedSource{src, done}, d.tx, d.store, handle, inbox.Config{Consumer: "bench", BatchSize: benchBatch, Logger: quiet})
	if err != nil {
		cancel()
		b.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Go(func() { _ = c.Run(ctx) })
	return done, func() { cancel(); wg.Wait() }
}

func benchIdem(b *testing.B, kind string) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	d := openDB(b, kind)
	q := newQueue(b, d, queue.Config{})
	done, stop := benchConsumer(b, ctx, d, q)
	defer stop()
	benchProduce(b, b.N, func(i int) error {
		return d.tx.InTx(ctx, func(tx *sql.Tx) error {
			_, err := q.EnqueueTx(ctx, tx, idem.Message{ID: fmt.Sprint("m", i), Topic: "bench", Payload: benchPayload})
			return err
		})
	}, done)
	if got := d.count(b, "SELECT count(*) FROM idem_queue WHERE outcome = 'applied'"); got != b.N {
		b.Errorf("%d rows retired as applied, want %d", got, b.N)
	}
}

// BenchmarkQueueBurst: a backlog that arrives at once. The consumer (as in
// BenchmarkQueue's idem variant) first drains a warm-up of 20 batches one
// message at a time, as a queue that starts empty does, so that its statements
// are planned on a small table; then b.N messages are enqueued in transactions
// of 1,000 and msgs/s is b.N over the time from the first of those to the
// last retirement. PostgreSQL only: the figure is about the plans Postgres
// caches for prepared statements.
//
//	go test -run '^$' -bench QueueBurst -benchtime 50000x ./queue
func BenchmarkQueueBurst(b *testing.B) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	d := openDB(b, "postgres")
	q := newQueue(b, d, queue.Config{})
	done, stop := benchConsumer(b, ctx, d, q)
	defer stop()
	enqueue := func(from, to int) {
		err := d.tx.InTx(ctx, func(tx *sql.Tx) error {
			msgs := make([]idem.Message, 0, to-from)
			for i := from; i < to; i++ {
				msgs = append(msgs, idem.Message{ID: fmt.Sprint("m", i), Topic: "bench", Payload: benchPayload})
			}
			_, err := q.EnqueueTx(ctx, tx, msgs...)
			return err
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	const warm = 20 * benchBatch
	for i := range warm {
		enqueue(i, i+1)
		for done.Load() <= int64(i) {
			time.Sleep(100 * time.Microsecond)
		}
	}
	b.ResetTimer()
	for i := warm; i < warm+b.N; i += 1000 {
		enqueue(i, min(i+1000, warm+b.N))
	}
	deadline := time.Now().Add(5 * time.Minute)
	for done.Load() < int64(warm+b.N) {
		if time.Now().After(deadline) {
			b.Fatalf("%d of %d messages consumed after 5 minutes", done.Load()-warm, b.N)
		}
		time.Sleep(time.Millisecond)
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
}

// countedSource counts the deliveries the inbox acks: after the commit that
// retired them.
type countedSource struct {
	*queue.Source[*sql.Tx]
	done *atomic.Int64
}

func (s countedSource) Receive(ctx context.Context, max int) ([]idem.Delivery, error) {
	ds, err := s.Source.Receive(ctx, max)
	for i := range ds {
		ds[i].Settler = countedSettler{ds[i].Settler, s.done}
	}
	return ds, err
}

// SettleTx hands the queue its own settlers back.
func (s countedSource) SettleTx(ctx context.Context, tx *sql.Tx, ds []idem.Delivery, outcomes []string) error {
	inner := make([]idem.Delivery, len(ds))
	for i, d := range ds {
		inner[i] = d
		if c, ok := d.Settler.(countedSettler); ok {
			inner[i].Settler = c.Settler
		}
	}
	return s.Source.SettleTx(ctx, tx, inner, outcomes)
}

type countedSettler struct {
	idem.Settler
	done *atomic.Int64
}

func (s countedSettler) Ack(ctx context.Context) error {
	err := s.Settler.Ack(ctx)
	if err == nil {
		s.done.Add(1)
	}
	return err
}

func benchBare(b *testing.B, kind string) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	d := openDB(b, kind)
	id, skip := "BIGSERIAL PRIMARY KEY", " FOR UPDATE SKIP LOCKED"
	if kind == "sqlite" {
		id, skip = "INTEGER PRIMARY KEY AUTOINCREMENT", ""
	}
	d.exec(b, "CREATE TABLE bare_queue (id "+id+", msg_id TEXT NOT NULL, payload BYTEA NOT NULL, leased_until BIGINT NOT NULL DEFAULT 0)")
	d.exec(b, "CREATE INDEX bare_queue_due ON bare_queue (leased_until, id)")
	claim := `UPDATE bare_queue SET leased_until = $1 WHERE id IN (
	SELECT id FROM bare_queue WHERE leased_until <= $2 ORDER BY leased_until, id LIMIT $3` + skip + `) RETURNING id, msg_id, payload`
	var done atomic.Int64
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	wg.Go(func() {
		for ctx.Err() == nil {
			now := time.Now()
			var ids []int64
			rs, err := d.db.QueryContext(ctx, claim, now.Add(30*time.Second).UnixMilli(), now.UnixMilli(), benchBatch)
			if err != nil {
				if ctx.Err() == nil {
					b.Error(err)
				}
				return
			}
			for rs.Next() {
				var id int64
				var msgID string
				var payload []byte
				if err := rs.Scan(&id, &msgID, &payload); err != nil {
					b.Error(err)
				}
				ids = append(ids, id)
			}
			if err := rs.Close(); err != nil {
				b.Error(err)
				return
			}
			if len(ids) == 0 {
				time.Sleep(2 * time.Millisecond) // idem's MinPollInterval
				continue
			}
			err = d.tx.InTx(ctx, func(tx *sql.Tx) error {
				for _, id := range ids { // one statement a row: SQLite and database/sql take no arrays
					if _, err := tx.ExecContext(ctx, "DELETE FROM bare_queue WHERE id = $1", id); err != nil {
						return err
					}
				}
				return nil
			})
			if err != nil {
				if ctx.Err() == nil {
					b.Error(err)
				}
				return
			}
			done.Add(int64(len(ids)))
		}
	})
	benchProduce(b, b.N, func(i int) error {
		return d.tx.InTx(ctx, func(tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, "INSERT INTO bare_queue (msg_id, payload) VALUES ($1, $2)", fmt.Sprint("m", i), benchPayload)
			return err
		})
	}, &done)
}
