package pgcdc_test

import (
	"context"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemnats"
	"github.com/idemhq/idem/idempg"
	"github.com/idemhq/idem/idempg/pgcdc"
	"github.com/idemhq/idem/internal/testsvc"
	"github.com/idemhq/idem/outbox"
)

// BenchmarkRelayCDCvsNotify measures, in one run on one private cluster and one
// NATS server, the CDC relay against the polling relay woken by NOTIFY:
//
//   - throughput: a backlog of msgs (10 per transaction) relayed to JetStream;
//   - commit to a subscriber's receipt, p50 and p99, with one message committed
//     per transaction at 1,000 a second for 3 seconds;
//   - statements per published message during the backlog (pg_stat_statements of
//     the database: what the relay asks of PostgreSQL; the WAL stream is not a
//     statement).
//
// go test -run '^$' -bench RelayCDCvsNotify -benchtime 1x ./idempg/pgcdc/
func BenchmarkRelayCDCvsNotify(b *testing.B) {
	const backlog = 5000
	for range b.N {
		for _, mode := range []string{"notify", "cdc", "cdc-nomark"} {
			tp, p50, p99, qpm := measure(b, mode, backlog)
			b.ReportMetric(tp, mode+"_msgs/s")
			b.ReportMetric(p50, mode+"_p50_ms")
			b.ReportMetric(p99, mode+"_p99_ms")
			b.ReportMetric(qpm, mode+"_stmts/msg")
		}
	}
}

func measure(b *testing.B, mode string, backlog int) (throughput, p50, p99, stmtsPerMsg float64) {
	ctx := context.Background()
	url := testsvc.LogicalPostgres(b)
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		b.Fatal(err)
	}
	defer pool.Close()
	if _, err := pool.Exec(ctx, "CREATE EXTENSION IF NOT EXISTS pg_stat_statements"); err != nil {
		b.Fatal(err)
	}
	ob, err := outbox.New(ctx, idempg.TxDB(pool), outbox.Config{})
	if err != nil {
		b.Fatal(err)
	}
	js := testsvc.JetStream(b, natsURL())
	stream := testsvc.UniqueName("CDCBENCH_")
	subject := stream + ".m"
	if _, err := idemnats.EnsureStream(ctx, js, idemnats.StreamConfig{Name: stream, Subjects: []string{stream + ".>"}, Storage: jetstream.MemoryStorage}); err != nil {
		b.Fatal(err)
	}
	defer js.DeleteStream(context.Background(), stream)
	sink, err := idemnats.NewSink(js, idemnats.SinkConfig{})
	if err != nil {
		b.Fatal(err)
	}
	slot := testsvc.UniqueName("bench_")
	var run func(context.Context) error
	if mode == "cdc" || mode == "cdc-nomark" {
		r, err := pgcdc.New(url, sink, pgcdc.Config{Slot: slot, Logger: quiet(), SkipMarkPublished: mode == "cdc-nomark"})
		if err != nil {
			b.Fatal(err)
		}
		if err := r.Setup(ctx); err != nil {
			b.Fatal(err)
		}
		run = r.Run
	} else {
		n := idempg.NewNotifier(pool, "")
		defer n.Close()
		r, err := ob.Relay(sink, outbox.RelayConfig{Notifier: n, BatchSize: 500, Logger: quiet()})
		if err != nil {
			b.Fatal(err)
		}
		run = r.Run
	}
	enqueue := func(first, n, per int) {
		for i := first; i < first+n; i += per {
			err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				msgs := make([]idem.Message, 0, per)
				for j := i; j < min(i+per, first+n); j++ {
					msgs = append(msgs, idem.Message{ID: "m-" + strconv.Itoa(j), Topic: subject, Payload: []byte(`{"n":1}`)})
				}
				_, err := ob.EnqueueTx(ctx, tx, msgs...)
				return err
			})
			if err != nil {
				b.Fatal(err)
			}
		}
	}
	count := func() uint64 {
		s, _ := js.Stream(ctx, stream)
		info, err := s.Info(ctx)
		if err != nil {
			b.Fatal(err)
		}
		return info.State.Msgs
	}
	statements := func() float64 {
		var n float64
		if err := pool.QueryRow(ctx, `SELECT COALESCE(SUM(calls), 0) FROM pg_stat_statements
			WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
			  AND query NOT LIKE '%pg_stat_statements%'`).Scan(&n); err != nil {
			b.Fatal(err)
		}
		return n
	}

	// Throughput over a backlog.
	enqueue(0, backlog, 10)
	before := statements()
	rctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	start := time.Now()
	go func() { defer close(done); run(rctx) }()
	for count() < uint64(backlog) {
		time.Sleep(2 * time.Millisecond)
	}
	elapsed := time.Since(start)
	stmts := statements() - before - 1 // the statements() call before is counted by the one after

	// Latency at 1,000 messages a second, one per transaction.
	sub, err := js.CreateOrUpdateConsumer(ctx, stream, jetstream.ConsumerConfig{DeliverPolicy: jetstream.DeliverNewPolicy, AckPolicy: jetstream.AckNonePolicy})
	if err != nil {
		b.Fatal(err)
	}
	var mu sync.Mutex
	committed := map[string]time.Time{}
	var lat []float64
	cc, err := sub.Consume(func(m jetstream.Msg) {
		now := time.Now()
		mu.Lock()
		defer mu.Unlock()
		if t, ok := committed[m.Headers().Get(jetstream.MsgIDHeader)]; ok {
			lat = append(lat, float64(now.Sub(t).Microseconds())/1000)
		}
	})
	if err != nil {
		b.Fatal(err)
	}
	const rate, seconds = 1000, 3
	tick := time.NewTicker(time.Second / rate)
	for i := backlog; i < backlog+rate*seconds; i++ {
		<-tick.C
		id := "m-" + strconv.Itoa(i)
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			_, err := ob.EnqueueTx(ctx, tx, idem.Message{ID: id, Topic: subject, Payload: []byte(`{"n":1}`)})
			return err
		})
		if err != nil {
			b.Fatal(err)
		}
		mu.Lock()
		committed[id] = time.Now()
		mu.Unlock()
	}
	tick.Stop()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		mu.Lock()
		n := len(lat)
		mu.Unlock()
		if n >= rate*seconds*99/100 && count() >= uint64(backlog+rate*seconds) {
			break
		}
	}
	cc.Stop()
	stop()
	<-done
	mu.Lock()
	defer mu.Unlock()
	slices.Sort(lat)
	if len(lat) == 0 {
		b.Fatal("no latencies")
	}
	pct := func(p float64) float64 { return lat[min(len(lat)-1, int(p*float64(len(lat))))] }
	b.Logf("%s: %d msgs in %v (%.0f/s); latency p50 %.1f ms p99 %.1f ms over %d; %.0f statements for %d msgs",
		mode, backlog, elapsed.Round(time.Millisecond), float64(backlog)/elapsed.Seconds(), pct(0.5), pct(0.99), len(lat), stmts, backlog)
	return float64(backlog) / elapsed.Seconds(), pct(0.5), pct(0.99), stmts / float64(backlog)
}
