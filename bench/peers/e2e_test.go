package peers_test

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemnats"
	"github.com/idemhq/idem/idempg"
	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/inbox"
	"github.com/idemhq/idem/internal/testsvc"
	"github.com/idemhq/idem/outbox"
	"github.com/idemhq/idem/queue"
)

// The end-to-end workload both sides run: a producer commits an order's event in its
// business transaction; a worker applies the order's effect (one ledger row) exactly
// once, in a transaction that also records that the event was handled.
//
//	river                 river v0.51 InsertTx; a river worker INSERTs the ledger row
//	                      and calls river.JobCompleteTx in one transaction (the
//	                      documented way to make a job's effect and its completion
//	                      atomic). river/defaults: one client, 16 workers, river's
//	                      default fetch settings (FetchCooldown 100 ms caps it at 16
//	                      jobs per 100 ms); river/tuned: 100 workers, FetchCooldown
//	                      1 ms (river's minimum), FetchPollInterval 50 ms.
//	idem/batch=K×C        outbox.EnqueueTx; the outbox relay (woken by NOTIFY)
//	                      publishes to NATS JetStream; C inbox consumers on one durable
//	                      apply K messages per transaction (claim keys + INSERT +
//	                      complete keys, commit, then ack).
//	idem/dbqueue/batch=K×C queue.EnqueueTx (the database as the queue, same
//	                      Postgres); C inbox consumers, each on its own
//	                      queue.Source (woken by NOTIFY idem_queue through its own
//	                      idempg.Notifier) on the same pool, apply K messages per
//	                      transaction: claim keys + INSERT + complete keys + retire
//	                      the queue rows (SettleTx), one commit; no broker.
//
// BenchmarkEndToEnd: 16 producers commit b.N events, one per transaction, while the
// workers run; msgs/s is b.N over the time from the first enqueue to the last
// effect's commit.
//
//	go test -run '^$' -bench EndToEnd -benchtime 20000x -count 3
func BenchmarkEndToEnd(b *testing.B) {
	for _, sys := range e2eSystems() {
		b.Run(sys.name, func(b *testing.B) {
			w := newE2E(b, sys)
			w.produce(b, b.N, 0)
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
		})
	}
}

// BenchmarkEndToEndLatency: one producer commits 1,000 events a second for 3 s;
// each event's enqueue-commit to effect-commit latency is measured in this process
// (both ends are in it, so one clock). Run with -benchtime 1x.
//
//	go test -run '^$' -bench EndToEndLatency -benchtime 1x -count 3
func BenchmarkEndToEndLatency(b *testing.B) {
	const rate, seconds = 1000, 3
	for _, sys := range e2eSystems() {
		b.Run(sys.name, func(b *testing.B) {
			for range b.N {
				w := newE2E(b, sys)
				lat := w.produce(b, rate*seconds, rate)
				slices.Sort(lat)
				b.ReportMetric(ms(lat[len(lat)/2]), "p50-ms")
				b.ReportMetric(ms(lat[len(lat)*99/100]), "p99-ms")
			}
		})
	}
}

func ms(d time.Duration) float64 { return d.Seconds() * 1000 }

type e2eSystem struct {
	name string
	// start makes the schema and starts the workers on pool; applied is called once
	// per effect committed, with the event's order number. It returns enqueue, which
	// commits the event of one order in tx.
	start func(b *testing.B, ctx context.Context, pool *pgxpool.Pool, applied func(order int)) (enqueue func(ctx context.Context, tx pgx.Tx, order int) error)
}

func e2eSystems() []e2eSystem {
	return []e2eSystem{
		{"river/defaults", func(b *testing.B, ctx context.Context, pool *pgxpool.Pool, applied func(int)) func(context.Context, pgx.Tx, int) error {
			return startRiver(b, ctx, pool, applied, &river.Config{Queues: map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: e2eWorkers}}})
		}},
		{"river/tuned", func(b *testing.B, ctx context.Context, pool *pgxpool.Pool, applied func(int)) func(context.Context, pgx.Tx, int) error {
			return startRiver(b, ctx, pool, applied, &river.Config{FetchCooldown: river.FetchCooldownMin, FetchPollInterval: 50 * time.Millisecond,
				Queues: map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 100}}})
		}},
		{"idem/batch=64x1", func(b *testing.B, ctx context.Context, pool *pgxpool.Pool, applied func(int)) func(context.Context, pgx.Tx, int) error {
			return startIdem(b, ctx, pool, applied, 64, 1)
		}},
		{"idem/batch=1x16", func(b *testing.B, ctx context.Context, pool *pgxpool.Pool, applied func(int)) func(context.Context, pgx.Tx, int) error {
			return startIdem(b, ctx, pool, applied, 1, 16)
		}},
		{"idem/dbqueue/batch=64x1", func(b *testing.B, ctx context.Context, pool *pgxpool.Pool, applied func(int)) func(context.Context, pgx.Tx, int) error {
			return startDBQueue(b, ctx, pool, applied, 64, 1, false)
		}},
		{"idem/dbqueue/batch=64x1/prefetch", func(b *testing.B, ctx context.Context, pool *pgxpool.Pool, applied func(int)) func(context.Context, pgx.Tx, int) error {
			return startDBQueue(b, ctx, pool, applied, 64, 1, true)
		}},
		{"idem/dbqueue/batch=64x2", func(b *testing.B, ctx context.Context, pool *pgxpool.Pool, applied func(int)) func(context.Context, pgx.Tx, int) error {
			return startDBQueue(b, ctx, pool, applied, 64, 2, false)
		}},
		{"idem/dbqueue/batch=1x8", func(b *testing.B, ctx context.Context, pool *pgxpool.Pool, applied func(int)) func(context.Context, pgx.Tx, int) error {
			return startDBQueue(b, ctx, pool, applied, 1, 8, false)
		}},
		{"idem/dbqueue/batch=1x8/prefetch", func(b *testing.B, ctx context.Context, pool *pgxpool.Pool, applied func(int)) func(context.Context, pgx.Tx, int) error {
			return startDBQueue(b, ctx, pool, applied, 1, 8, true)
		}},
	}
}

// e2e is one run of a system: its pool, its enqueue, and the record of effects.
type e2e struct {
	pool    *pgxpool.Pool
	enqueue func(context.Context, pgx.Tx, int) error

	mu       sync.Mutex
	enqueued map[int]time.Time // order -> its enqueue's commit
	latency  []time.Duration
	applied  map[int]int // order -> effects (deliveries, for idem) seen committed
	done     atomic.Int64
}

const e2eWorkers = 16

func newE2E(b *testing.B, sys e2eSystem) *e2e {
	cs, _ := testsvc.PostgresSchema(b)
	cfg, err := pgxpool.ParseConfig(cs)
	if err != nil {
		b.Fatal(err)
	}
	cfg.MaxConns = 2*e2eWorkers + 4 // producers, workers, the relay and listeners
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(pool.Close)
	ctx, cancel := context.WithCancel(context.Background())
	w := &e2e{pool: pool, enqueued: map[int]time.Time{}, applied: map[int]int{}}
	if _, err := pool.Exec(ctx, "CREATE TABLE ledger (order_no BIGINT NOT NULL, amount BIGINT NOT NULL)"); err != nil {
		b.Fatal(err)
	}
	w.enqueue = sys.start(b, ctx, pool, w.effect)
	b.Cleanup(func() {
		cancel()
		w.check(b)
	})
	return w
}

// effect records an effect's commit (for idem: a delivery acked after its effect
// committed; a redelivery, acked again, is not counted twice here, and the ledger
// check finds a doubled effect).
func (w *e2e) effect(order int) {
	now := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	w.applied[order]++
	if w.applied[order] > 1 {
		return
	}
	if at, ok := w.enqueued[order]; ok {
		w.latency = append(w.latency, now.Sub(at))
	}
	w.done.Add(1)
}

// produce commits n events from e2eWorkers producers (rate 0: as fast as they
// can) or from one producer at rate events a second, and waits until n effects
// have committed. It returns the latencies of the events.
func (w *e2e) produce(b *testing.B, n, rate int) []time.Duration {
	b.Helper()
	ctx := context.Background()
	one := func(order int) error {
		tx, err := w.pool.Begin(ctx)
		if err != nil {
			return err
		}
		defer tx.Rollback(ctx)
		if err := w.enqueue(ctx, tx, order); err != nil {
			return err
		}
		// The clock starts as the commit is sent: the effect cannot commit before it.
		w.mu.Lock()
		w.enqueued[order] = time.Now()
		w.mu.Unlock()
		return tx.Commit(ctx)
	}
	b.ResetTimer()
	var next atomic.Int64
	errc := make(chan error, e2eWorkers)
	if rate == 0 {
		for range e2eWorkers {
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
	} else {
		go func() {
			start := time.Now()
			for i := 1; i <= n; i++ {
				if d := time.Until(start.Add(time.Duration(i) * time.Second / time.Duration(rate))); d > 0 {
					time.Sleep(d)
				}
				if err := one(i); err != nil {
					errc <- err
					return
				}
			}
			errc <- nil
		}()
	}
	deadline := time.Now().Add(5 * time.Minute)
	for w.done.Load() < int64(n) {
		select {
		case err := <-errc:
			if err != nil {
				b.Fatalf("enqueue: %v", err)
			}
		case <-time.After(time.Millisecond):
		}
		if time.Now().After(deadline) {
			b.Fatalf("%d of %d effects after 5 minutes", w.done.Load(), n)
		}
	}
	b.StopTimer()
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.latency)
}

// check: every order's effect committed exactly once, in the ledger too.
func (w *e2e) check(b *testing.B) {
	w.mu.Lock()
	defer w.mu.Unlock()
	var rows, distinct int64
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := w.pool.QueryRow(ctx, "SELECT count(*), count(DISTINCT order_no) FROM ledger").Scan(&rows, &distinct); err != nil {
		b.Errorf("count ledger: %v", err)
		return
	}
	if rows != distinct || distinct != int64(len(w.applied)) {
		b.Errorf("ledger holds %d rows for %d orders; %d effects were seen", rows, distinct, len(w.applied))
	}
}

// ---- river ----

type e2eArgs struct {
	Order   int    `json:"order"`
	Payload string `json:"payload"`
}

func (e2eArgs) Kind() string { return "e2e_order" }

type e2eWorker struct {
	river.WorkerDefaults[e2eArgs]
	pool    *pgxpool.Pool
	applied func(int)
}

func (w *e2eWorker) Work(ctx context.Context, job *river.Job[e2eArgs]) error {
	err := pgx.BeginFunc(ctx, w.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "INSERT INTO ledger (order_no, amount) VALUES ($1, $2)", job.Args.Order, len(job.Args.Payload)); err != nil {
			return err
		}
		_, err := river.JobCompleteTx[*riverpgxv5.Driver](ctx, tx, job)
		return err
	})
	if err == nil {
		w.applied(job.Args.Order)
	}
	return err
}

func startRiver(b *testing.B, ctx context.Context, pool *pgxpool.Pool, applied func(int), cfg *river.Config) func(context.Context, pgx.Tx, int) error {
	driver := riverpgxv5.New(pool)
	m, err := rivermigrate.New(driver, nil)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := m.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		b.Fatal(err)
	}
	workers := river.NewWorkers()
	river.AddWorker(workers, &e2eWorker{pool: pool, applied: applied})
	cfg.Logger, cfg.Workers = slog.New(slog.DiscardHandler), workers
	client, err := river.NewClient(driver, cfg)
	if err != nil {
		b.Fatal(err)
	}
	if err := client.Start(ctx); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = client.Stop(sctx)
	})
	return func(ctx context.Context, tx pgx.Tx, order int) error {
		_, err := client.InsertTx(ctx, tx, e2eArgs{Order: order, Payload: payload100}, nil)
		return err
	}
}

// ---- idem ----

func startIdem(b *testing.B, ctx context.Context, pool *pgxpool.Pool, applied func(int), batch, consumers int) func(context.Context, pgx.Tx, int) error {
	js := connectNATS(b)
	prefix := testsvc.UniqueName("ideme2e.")
	stream := jsStream(b, js, "IDEME2E_", prefix+".>")
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	sink, err := idemnats.NewSink(js, idemnats.SinkConfig{})
	if err != nil {
		b.Fatal(err)
	}
	db := idempg.TxDB(pool)
	quiet := slog.New(slog.DiscardHandler)
	ob, err := outbox.New(ctx, db, outbox.Config{})
	if err != nil {
		b.Fatal(err)
	}
	nt := idempg.NewNotifier(pool, "")
	b.Cleanup(func() { nt.Close() })
	relay, err := ob.Relay(sink, outbox.RelayConfig{Notifier: nt, Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	store, err := idempg.New(ctx, pool, idempg.Config{})
	if err != nil {
		b.Fatal(err)
	}
	var wg sync.WaitGroup
	b.Cleanup(wg.Wait) // after the context's cancel (registered later, so run first)
	wg.Add(1)
	go func() { defer wg.Done(); _ = relay.Run(ctx) }()
	insert := func(ctx context.Context, tx pgx.Tx, m idem.Message) error {
		order, err := strconv.Atoi(strings.TrimPrefix(m.ID, "order-"))
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, "INSERT INTO ledger (order_no, amount) VALUES ($1, $2)", order, len(m.Payload))
		return err
	}
	for i := range consumers {
		src, err := idemnats.NewSource(sctx, js, idemnats.SourceConfig{Stream: stream, Durable: "e2e"})
		if err != nil {
			b.Fatal(err)
		}
		c, err := inbox.New(ctx, ackedSource{src, applied}, db, store, insert,
			inbox.Config{Consumer: "e2e", BatchSize: batch, Logger: quiet})
		if err != nil {
			b.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer src.Close()
			if err := c.Run(ctx); err != nil && ctx.Err() == nil {
				b.Errorf("consumer %d: %v", i, err)
			}
		}()
	}
	return func(ctx context.Context, tx pgx.Tx, order int) error {
		_, err := ob.EnqueueTx(ctx, tx, idem.Message{ID: fmt.Sprintf("order-%d", order), Topic: prefix + ".orders", Payload: []byte(payload100)})
		return err
	}
}

// ackedSource reports each delivery the inbox acks: the inbox acks only after the
// effect's transaction committed (or after finding the message applied before, which
// a first delivery in this run never is).
type ackedSource struct {
	idem.Source
	applied func(int)
}

func (s ackedSource) Receive(ctx context.Context, max int) ([]idem.Delivery, error) {
	ds, err := s.Source.Receive(ctx, max)
	for i := range ds {
		order, perr := strconv.Atoi(strings.TrimPrefix(ds[i].ID, "order-"))
		if perr == nil {
			ds[i].Settler = ackedSettler{ds[i].Settler, func() { s.applied(order) }}
		}
	}
	return ds, err
}

type ackedSettler struct {
	idem.Settler
	acked func()
}

func (s ackedSettler) Ack(ctx context.Context) error {
	s.acked()
	return s.Settler.Ack(ctx)
}

// ---- idem, the database as the queue ----

// dbQueueOn returns idem's side of a database-queue benchmark on pool: its TxDB, a
// queue (quiet) and the Postgres store of the inbox's keys.
func dbQueueOn(b *testing.B, ctx context.Context, pool *pgxpool.Pool) (idemsql.TxDB[pgx.Tx], *queue.Queue[pgx.Tx], *idempg.Store) {
	b.Helper()
	db := idempg.TxDB(pool)
	q, err := queue.New(ctx, db, queue.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	store, err := idempg.New(ctx, pool, idempg.Config{})
	if err != nil {
		b.Fatal(err)
	}
	return db, q, store
}

func startDBQueue(b *testing.B, ctx context.Context, pool *pgxpool.Pool, applied func(int), batch, consumers int, prefetch bool) func(context.Context, pgx.Tx, int) error {
	db, q, store := dbQueueOn(b, ctx, pool)
	quiet := slog.New(slog.DiscardHandler)
	topic := "orders"
	insert := func(ctx context.Context, tx pgx.Tx, m idem.Message) error {
		order, err := strconv.Atoi(strings.TrimPrefix(m.ID, "order-"))
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, "INSERT INTO ledger (order_no, amount) VALUES ($1, $2)", order, len(m.Payload))
		return err
	}
	b.Cleanup(func() { // after the consumers stopped: every row retired in its effect's transaction
		var other int64
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := pool.QueryRow(ctx, "SELECT count(*) FROM idem_queue WHERE finished_at IS NULL OR outcome <> $1", idemsql.QueueApplied).Scan(&other); err != nil {
			b.Errorf("count queue outcomes: %v", err)
		} else if other != 0 {
			b.Errorf("%d queue rows unfinished or finished otherwise than applied (in the effect's transaction)", other)
		}
	})
	var wg sync.WaitGroup
	b.Cleanup(wg.Wait) // after the context's cancel (registered later, so run first)
	for i := range consumers {
		nt := idempg.NewNotifier(pool, idemsql.QueueNotifyChannel)
		src, err := q.Source(queue.SourceConfig{Topic: topic, Notifier: nt, Prefetch: prefetch})
		if err != nil {
			b.Fatal(err)
		}
		c, err := inbox.New(ctx, ackedTxSource{src, applied}, db, store, insert,
			inbox.Config{Consumer: "e2e", BatchSize: batch, Logger: quiet})
		if err != nil {
			b.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer nt.Close()
			defer src.Close()
			if err := c.Run(ctx); err != nil && ctx.Err() == nil {
				b.Errorf("consumer %d: %v", i, err)
			}
		}()
	}
	return func(ctx context.Context, tx pgx.Tx, order int) error {
		_, err := q.EnqueueTx(ctx, tx, idem.Message{ID: fmt.Sprintf("order-%d", order), Topic: topic, Payload: []byte(payload100)})
		return err
	}
}

// ackedTxSource is ackedSource for a queue.Source: still an inbox.TxSource (the
// inbox retires each row in its effect's transaction), its deliveries report
// the Ack the inbox makes after the commit.
type ackedTxSource struct {
	*queue.Source[pgx.Tx]
	applied func(int)
}

func (s ackedTxSource) Receive(ctx context.Context, max int) ([]idem.Delivery, error) {
	return ackedSource{s.Source, s.applied}.Receive(ctx, max)
}

// SettleTx hands the queue its own settlers back.
func (s ackedTxSource) SettleTx(ctx context.Context, tx pgx.Tx, ds []idem.Delivery, outcomes []string) error {
	inner := make([]idem.Delivery, len(ds))
	for i, d := range ds {
		inner[i] = d
		if a, ok := d.Settler.(ackedSettler); ok {
			inner[i].Settler = a.Settler
		}
	}
	return s.Source.SettleTx(ctx, tx, inner, outcomes)
}
