package outbox_test

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemmysql"
	"github.com/idemhq/idem/idempg"
	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/internal/testsvc"
	"github.com/idemhq/idem/outbox"
)

// BenchmarkRelayThroughput: one relay publishing a backlog of b.N committed messages
// from Postgres to NATS JetStream, beside the same messages published straight to
// JetStream by the same sink (the broker's own ceiling).
func BenchmarkRelayThroughput(b *testing.B) {
	ctx := context.Background()
	pool := testsvc.PostgresPool(b)
	ob, err := outbox.New(ctx, idempg.TxDB(pool), outbox.Config{})
	if err != nil {
		b.Fatal(err)
	}
	msgs := func(subject string, n int) []idem.Message {
		out := make([]idem.Message, n)
		for i := range out {
			out[i] = idem.Message{ID: fmt.Sprintf("%s-%d", subject, i), Topic: subject, OrderingKey: fmt.Sprint(i % 100), Payload: make([]byte, 100)}
		}
		return out
	}
	b.Run("baseline=direct-publish", func(b *testing.B) {
		_, _, subject, sink := natsSink(b)
		ms := msgs(subject, b.N)
		b.ResetTimer()
		for start := 0; start < len(ms); start += 500 {
			if err := sink.Publish(ctx, ms[start:min(start+500, len(ms))]...); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
	})
	b.Run("relay", func(b *testing.B) {
		_, _, subject, sink := natsSink(b)
		ms := msgs(subject, b.N)
		for start := 0; start < len(ms); start += 500 {
			err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				_, err := ob.EnqueueTx(ctx, tx, ms[start:min(start+500, len(ms))]...)
				return err
			})
			if err != nil {
				b.Fatal(err)
			}
		}
		drainBacklog(b, ob, sink)
	})
	b.Run("relay=mysql", func(b *testing.B) {
		_, _, subject, sink := natsSink(b)
		db := testsvc.MySQLDB(b)
		mob, err := outbox.New(ctx, idemmysql.TxDB(db), outbox.Config{})
		if err != nil {
			b.Fatal(err)
		}
		ms := msgs(subject, b.N)
		for start := 0; start < len(ms); start += 500 {
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := mob.EnqueueTx(ctx, tx, ms[start:min(start+500, len(ms))]...); err != nil {
				b.Fatal(err)
			}
			if err := tx.Commit(); err != nil {
				b.Fatal(err)
			}
		}
		drainBacklog(b, mob, sink)
	})
}

// drainBacklog times one relay of ob publishing b.N committed messages to sink.
func drainBacklog[Tx any](b *testing.B, ob *outbox.Outbox[Tx], sink idem.Sink) {
	b.Helper()
	r, err := ob.Relay(sink, outbox.RelayConfig{BatchSize: 500, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for done := 0; done < b.N; {
		n, err := r.RunOnce(context.Background())
		if err != nil {
			b.Fatal(err)
		}
		done += n
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
}

// BenchmarkRelayLatency: a producer commits 1,000 messages a second for 3 s; the
// commit-to-publish latency of each is measured at the sink, with the relay woken by
// LISTEN/NOTIFY and, beside it, polling (adaptively: 10 ms after a round that
// published, doubling up to 1 s while rounds find nothing), on PostgreSQL and on
// MySQL, which has no NOTIFY. Run with -benchtime 1x.
func BenchmarkRelayLatency(b *testing.B) {
	for _, mode := range []string{"notify", "poll", "mysql"} {
		b.Run(mode, func(b *testing.B) {
			for b.Loop() {
				var p50, p99 time.Duration
				switch mode {
				case "mysql": // no NOTIFY: the relay polls adaptively (10 ms after a publish, up to 1 s)
					p50, p99 = relayLatency(b, idemmysql.TxDB(testsvc.MySQLDB(b)), nil)
				default:
					pool := testsvc.PostgresPool(b)
					var n outbox.Notifier
					if mode == "notify" {
						nt := idempg.NewNotifier(pool, "")
						defer nt.Close()
						n = nt
					}
					p50, p99 = relayLatency(b, idempg.TxDB(pool), n)
				}
				b.ReportMetric(p50.Seconds()*1000, "p50-ms")
				b.ReportMetric(p99.Seconds()*1000, "p99-ms")
			}
		})
	}
}

// timingSink records when each message reached the broker.
type timingSink struct {
	idem.Sink
	mu  sync.Mutex
	at  map[string]time.Time
	all chan struct{}
	n   int
}

func (s *timingSink) Publish(ctx context.Context, msgs ...idem.Message) error {
	if err := s.Sink.Publish(ctx, msgs...); err != nil {
		return err
	}
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, m := range msgs {
		if _, ok := s.at[m.ID]; !ok {
			s.at[m.ID] = now
		}
	}
	if len(s.at) == s.n {
		close(s.all)
	}
	return nil
}

func relayLatency[Tx any](b *testing.B, db idemsql.TxDB[Tx], notifier outbox.Notifier) (p50, p99 time.Duration) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ob, err := outbox.New(ctx, db, outbox.Config{})
	if err != nil {
		b.Fatal(err)
	}
	const rate, seconds = 1000, 3
	_, _, subject, nsink := natsSink(b)
	sink := &timingSink{Sink: nsink, at: map[string]time.Time{}, all: make(chan struct{}), n: rate * seconds}
	cfg := outbox.RelayConfig{PollInterval: time.Second, Logger: slog.New(slog.DiscardHandler), Notifier: notifier}
	// The relay runs on an Outbox of its own, as in another process: no in-process
	// wake from the producer's EnqueueTx, only NOTIFY or the poll.
	relayOb, err := outbox.New(ctx, db, outbox.Config{})
	if err != nil {
		b.Fatal(err)
	}
	r, err := relayOb.Relay(sink, cfg)
	if err != nil {
		b.Fatal(err)
	}
	go r.Run(ctx)
	time.Sleep(200 * time.Millisecond) // let it LISTEN (not asserted: a late LISTEN only shows as latency)
	committed := make(map[string]time.Time, sink.n)
	tick := time.NewTicker(time.Second / rate)
	defer tick.Stop()
	for i := 0; i < sink.n; i++ {
		<-tick.C
		id := fmt.Sprintf("lat-%d", i)
		err := db.InTx(ctx, func(tx Tx) error {
			_, err := ob.EnqueueTx(ctx, tx, idem.Message{ID: id, Topic: subject, Payload: []byte("x")})
			return err
		})
		if err != nil {
			b.Fatal(err)
		}
		committed[id] = time.Now()
	}
	select {
	case <-sink.all:
	case <-time.After(30 * time.Second):
		b.Fatal("not every message was published within 30 s")
	}
	sink.mu.Lock()
	defer sink.mu.Unlock()
	lat := make([]time.Duration, 0, len(committed))
	for id, c := range committed {
		lat = append(lat, max(sink.at[id].Sub(c), 0))
	}
	slices.Sort(lat)
	return lat[len(lat)/2], lat[len(lat)*99/100]
}

// BenchmarkRelaysScale: 1, 2 and 4 relays on one Postgres draining one backlog of
// b.N committed messages (100 ordering keys, so all 64 partitions) to NATS
// JetStream: how far adding relays goes when they share a database and a broker.
// Each relay takes the partitions it can lock (outbox.Partitions), so they never
// publish the same partition at once.
func BenchmarkRelaysScale(b *testing.B) {
	ctx := context.Background()
	for _, relays := range []int{1, 2, 4} {
		b.Run(fmt.Sprintf("relays=%d", relays), func(b *testing.B) {
			pool := testsvc.PostgresPool(b)
			ob, err := outbox.New(ctx, idempg.TxDB(pool), outbox.Config{})
			if err != nil {
				b.Fatal(err)
			}
			_, _, subject, sink := natsSink(b)
			for start := 0; start < b.N; start += 500 {
				ms := make([]idem.Message, 0, 500)
				for i := start; i < min(start+500, b.N); i++ {
					ms = append(ms, idem.Message{ID: fmt.Sprintf("%s-%d", subject, i), Topic: subject, OrderingKey: fmt.Sprint(i % 100), Payload: make([]byte, 100)})
				}
				if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { _, err := ob.EnqueueTx(ctx, tx, ms...); return err }); err != nil {
					b.Fatal(err)
				}
			}
			rs := make([]*outbox.Relay[pgx.Tx], relays)
			for i := range rs {
				if rs[i], err = ob.Relay(sink, outbox.RelayConfig{BatchSize: 500, Logger: slog.New(slog.DiscardHandler)}); err != nil {
					b.Fatal(err)
				}
			}
			var mu sync.Mutex
			done := 0
			b.ResetTimer()
			var wg sync.WaitGroup
			for _, r := range rs {
				wg.Go(func() {
					for {
						mu.Lock()
						finished := done >= b.N
						mu.Unlock()
						if finished {
							return
						}
						n, err := r.RunOnce(ctx)
						if err != nil {
							b.Error(err)
							return
						}
						mu.Lock()
						done += n
						mu.Unlock()
					}
				})
			}
			wg.Wait()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
		})
	}
}
