package peers_test

import (
	"context"
	stdsql "database/sql"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wmnats "github.com/ThreeDotsLabs/watermill-nats/v2/pkg/nats"
	wmsql "github.com/ThreeDotsLabs/watermill-sql/v3/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/components/forwarder"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemnats"
	"github.com/idemhq/idem/idempg"
	"github.com/idemhq/idem/internal/testsvc"
	"github.com/idemhq/idem/outbox"
)

// BenchmarkOutboxPeers: "publish what the transaction committed", on the same
// Postgres and the same NATS JetStream in one run. A backlog of b.N messages of 100
// bytes is committed to the outbox beforehand (untimed, 500 a transaction); the clock
// runs from the relay's start until the destination stream holds b.N messages, each
// stored and acknowledged by JetStream.
//
//	watermill-forwarder/batch=100   watermill's forwarder (components/forwarder): the
//	                                producer's forwarder.Publisher wraps a watermill-sql
//	                                v3 Publisher (the outbox is a watermill-sql topic);
//	                                the Forwarder reads it with a watermill-sql
//	                                Subscriber (SubscribeBatchSize 100, its default) and
//	                                publishes with watermill-nats v2's JetStream
//	                                Publisher (TrackMsgId: Nats-Msg-Id = message UUID)
//	idem/relay/batch=100            outbox.Relay (BatchSize 100, its default) on
//	                                idempg, publishing with idemnats.Sink (PubAcks
//	                                pipelined, up to MaxInFlight 256 in flight)
//	idem/relay/batch=100/inflight=1 the same with SinkConfig.MaxInFlight 1: one PubAck
//	                                awaited before the next publish, as watermill-nats does
//
// After each run the stream is read back: every message id must be there; messages
// stored twice are reported as dup-msgs, and publishes beyond b.N (a republish the
// stream's Nats-Msg-Id window would drop) as republished.
//
//	go test -run '^$' -bench OutboxPeers -benchtime 5000x -count 3
func BenchmarkOutboxPeers(b *testing.B) {
	b.Run("watermill-forwarder/batch=100", func(b *testing.B) { benchForwarder(b) })
	b.Run("idem/relay/batch=100", func(b *testing.B) { benchRelay(b, 0) })
	b.Run("idem/relay/batch=100/inflight=1", func(b *testing.B) { benchRelay(b, 1) })
}

// destStream creates a JetStream stream of its own capturing one subject, deleted
// when b ends.
func destStream(b *testing.B, js jetstream.JetStream) (stream, subject string) {
	b.Helper()
	subject = testsvc.UniqueName("fwdpeers.")
	return jsStream(b, js, "FWDPEERS_", subject), subject
}

// jsStream creates a JetStream stream named prefix plus a unique suffix, capturing
// subjects, deleted when tb ends, and returns its name.
func jsStream(tb testing.TB, js jetstream.JetStream, prefix string, subjects ...string) string {
	tb.Helper()
	stream := testsvc.UniqueName(prefix)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := idemnats.EnsureStream(ctx, js, idemnats.StreamConfig{Name: stream, Subjects: subjects}); err != nil {
		tb.Fatalf("EnsureStream: %v", err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = js.DeleteStream(ctx, stream)
	})
	return stream
}

// schemaDB opens database/sql (driver pgx) on a fresh Postgres schema, selected
// through search_path and dropped when tb ends.
func schemaDB(tb testing.TB) *stdsql.DB {
	tb.Helper()
	cs, _ := testsvc.PostgresSchema(tb)
	db, err := stdsql.Open("pgx", cs)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { db.Close() })
	if err := db.Ping(); err != nil {
		tb.Fatal(err)
	}
	return db
}

// streamMsgs is how many messages stream holds.
func streamMsgs(b *testing.B, js jetstream.JetStream, stream string) int {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, stream)
	if err != nil {
		b.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		b.Fatal(err)
	}
	return int(info.State.Msgs)
}

// awaitStream waits until stream holds n messages, or fails b after timeout.
func awaitStream(b *testing.B, js jetstream.JetStream, stream string, n int, errc <-chan error) {
	deadline := time.Now().Add(5 * time.Minute)
	for streamMsgs(b, js, stream) < n {
		if time.Now().After(deadline) {
			b.Fatalf("stream %s: %d of %d messages after 5 minutes", stream, streamMsgs(b, js, stream), n)
		}
		select {
		case err := <-errc:
			b.Fatalf("relay stopped: %v", err)
		case <-time.After(2 * time.Millisecond):
		}
	}
}

// checkStream reads stream back and fails b unless it holds every id m-0..m-(n-1);
// it reports the messages stored more than once as dup-msgs.
func checkStream(b *testing.B, js jetstream.JetStream, stream string, n int) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := js.Stream(ctx, stream)
	if err != nil {
		b.Fatal(err)
	}
	total := streamMsgs(b, js, stream)
	c, err := s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	if err != nil {
		b.Fatal(err)
	}
	seen := make(map[string]int, n)
	for got := 0; got < total; {
		batch, err := c.Fetch(min(1000, total-got), jetstream.FetchMaxWait(10*time.Second))
		if err != nil {
			b.Fatal(err)
		}
		before := got
		for m := range batch.Messages() {
			seen[m.Headers().Get("Nats-Msg-Id")]++
			got++
		}
		if err := batch.Error(); err != nil {
			b.Fatal(err)
		}
		if got == before {
			b.Fatalf("stream %s: read %d of %d messages", stream, got, total)
		}
	}
	for i := range n {
		if seen["m-"+strconv.Itoa(i)] == 0 {
			b.Fatalf("stream %s: message m-%d missing (%d messages, %d distinct ids)", stream, i, total, len(seen))
		}
	}
	if len(seen) != n {
		b.Fatalf("stream %s: %d distinct ids, want %d", stream, len(seen), n)
	}
	b.ReportMetric(float64(total-n), "dup-msgs")
}

// countingPublisher counts the messages its Publisher had acknowledged.
type countingPublisher struct {
	message.Publisher
	n atomic.Int64
}

func (p *countingPublisher) Publish(topic string, msgs ...*message.Message) error {
	if err := p.Publisher.Publish(topic, msgs...); err != nil {
		return err
	}
	p.n.Add(int64(len(msgs)))
	return nil
}

// countingSink counts the messages its Sink had acknowledged.
type countingSink struct {
	idem.Sink
	n atomic.Int64
}

func (s *countingSink) Publish(ctx context.Context, msgs ...idem.Message) error {
	if err := s.Sink.Publish(ctx, msgs...); err != nil {
		return err
	}
	s.n.Add(int64(len(msgs)))
	return nil
}

// forwarderEnv is one watermill forwarder set-up: a watermill-sql topic as the
// outbox on a fresh schema, a JetStream stream as the destination.
type forwarderEnv struct {
	db       *stdsql.DB
	schema   wmsql.DefaultPostgreSQLSchema
	fwdTopic string // the watermill-sql topic the forwarder reads (its outbox)
	js       jetstream.JetStream
	stream   string
	subject  string // the destination topic (a JetStream subject)
}

func newForwarderEnv(b *testing.B) *forwarderEnv {
	db := schemaDB(b)
	e := &forwarderEnv{db: db, fwdTopic: testsvc.UniqueName("fwd_"), js: connectNATS(b)}
	// Its defaults: JSON payload (the envelope is JSON), SubscribeBatchSize 100.
	e.schema = wmsql.DefaultPostgreSQLSchema{}
	e.stream, e.subject = destStream(b, e.js)
	return e
}

// subscriber is the forwarder's watermill-sql Subscriber; it creates the topic's
// tables. PollInterval (the wait after a query that found nothing; default 1 s) is
// 10 ms, idem's relay's shortest poll (outbox.MinPollInterval).
func (e *forwarderEnv) subscriber(b *testing.B) *wmsql.Subscriber {
	sub, err := wmsql.NewSubscriber(e.db, wmsql.SubscriberConfig{
		ConsumerGroup:  "forwarder",
		PollInterval:   10 * time.Millisecond,
		ResendInterval: 10 * time.Millisecond,
		SchemaAdapter:  e.schema,
		OffsetsAdapter: wmsql.DefaultPostgreSQLOffsetsAdapter{},
	}, watermill.NopLogger{})
	if err != nil {
		b.Fatal(err)
	}
	if err := sub.SubscribeInitialize(e.fwdTopic); err != nil {
		b.Fatal(err)
	}
	return sub
}

// enqueueTx writes msgs to the outbox in tx, as a producer does: watermill-sql's
// Publisher on the transaction, wrapped by forwarder.Publisher (which envelopes each
// message with its destination topic).
func (e *forwarderEnv) enqueueTx(tx *stdsql.Tx, msgs ...*message.Message) error {
	pub, err := wmsql.NewPublisher(tx, wmsql.PublisherConfig{SchemaAdapter: e.schema}, watermill.NopLogger{})
	if err != nil {
		return err
	}
	return forwarder.NewPublisher(pub, forwarder.PublisherConfig{ForwarderTopic: e.fwdTopic}).Publish(e.subject, msgs...)
}

// forwarder returns a Forwarder from sub to JetStream through dest, which wraps
// watermill-nats's Publisher (see natsPublisher).
func (e *forwarderEnv) forwarder(b *testing.B, sub *wmsql.Subscriber, dest func(message.Publisher) message.Publisher) *forwarder.Forwarder {
	pub, err := wmnats.NewPublisherWithNatsConn(e.js.Conn(), wmnats.PublisherPublishConfig{
		Marshaler:         &wmnats.NATSMarshaler{},
		SubjectCalculator: wmnats.DefaultSubjectCalculator,
		// Nats-Msg-Id = the message's UUID, as idemnats.Sink sets it to Message.ID:
		// the same dedup work for the broker on both sides.
		JetStream: wmnats.JetStreamConfig{TrackMsgId: true},
	}, watermill.NopLogger{})
	if err != nil {
		b.Fatal(err)
	}
	f, err := forwarder.NewForwarder(sub, dest(pub), watermill.NopLogger{}, forwarder.Config{ForwarderTopic: e.fwdTopic})
	if err != nil {
		b.Fatal(err)
	}
	return f
}

func benchForwarder(b *testing.B) {
	ctx := context.Background()
	e := newForwarderEnv(b)
	sub := e.subscriber(b)
	payload := make([]byte, 100)
	for start := 0; start < b.N; start += 500 {
		msgs := make([]*message.Message, 0, 500)
		for i := start; i < min(start+500, b.N); i++ {
			msgs = append(msgs, message.NewMessage("m-"+strconv.Itoa(i), payload))
		}
		tx, err := e.db.BeginTx(ctx, nil)
		if err != nil {
			b.Fatal(err)
		}
		if err := e.enqueueTx(tx, msgs...); err != nil {
			b.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			b.Fatal(err)
		}
	}
	var counter *countingPublisher
	f := e.forwarder(b, sub, func(p message.Publisher) message.Publisher {
		counter = &countingPublisher{Publisher: p}
		return counter
	})

	b.ResetTimer()
	start := time.Now()
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	errc := make(chan error, 1)
	go func() { errc <- f.Run(runCtx) }()
	awaitStream(b, e.js, e.stream, b.N, errc)
	elapsed := time.Since(start)
	b.StopTimer()
	if err := f.Close(); err != nil {
		b.Fatal(err)
	}
	stop()
	checkStream(b, e.js, e.stream, b.N)
	b.ReportMetric(float64(counter.n.Load()-int64(b.N)), "republished")
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "msgs/s")
}

// relayEnv is one idem relay set-up: an outbox on a fresh schema, a JetStream
// stream as the destination.
type relayEnv struct {
	pool    *pgxpool.Pool
	ob      *outbox.Outbox[pgx.Tx]
	js      jetstream.JetStream
	stream  string
	subject string
	sink    *idemnats.Sink
}

func newRelayEnv(b *testing.B, maxInFlight int) *relayEnv {
	pool := testsvc.PostgresPool(b)
	ob, err := outbox.New(context.Background(), idempg.TxDB(pool), outbox.Config{})
	if err != nil {
		b.Fatal(err)
	}
	e := &relayEnv{pool: pool, ob: ob, js: connectNATS(b)}
	e.stream, e.subject = destStream(b, e.js)
	if e.sink, err = idemnats.NewSink(e.js, idemnats.SinkConfig{MaxInFlight: maxInFlight}); err != nil {
		b.Fatal(err)
	}
	return e
}

func benchRelay(b *testing.B, maxInFlight int) {
	ctx := context.Background()
	e := newRelayEnv(b, maxInFlight)
	for start := 0; start < b.N; start += 500 {
		ms := make([]idem.Message, 0, 500)
		for i := start; i < min(start+500, b.N); i++ {
			ms = append(ms, idem.Message{ID: "m-" + strconv.Itoa(i), Topic: e.subject, Payload: make([]byte, 100)})
		}
		if err := pgx.BeginFunc(ctx, e.pool, func(tx pgx.Tx) error { _, err := e.ob.EnqueueTx(ctx, tx, ms...); return err }); err != nil {
			b.Fatal(err)
		}
	}
	sink := &countingSink{Sink: e.sink}
	// A relay on an Outbox of its own, as in another process (no in-process wake).
	relayOb, err := outbox.New(ctx, idempg.TxDB(e.pool), outbox.Config{})
	if err != nil {
		b.Fatal(err)
	}
	r, err := relayOb.Relay(sink, outbox.RelayConfig{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}

	b.ResetTimer()
	start := time.Now()
	runCtx, stop := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() { errc <- r.Run(runCtx) }()
	awaitStream(b, e.js, e.stream, b.N, errc)
	elapsed := time.Since(start)
	b.StopTimer()
	stop()
	<-errc
	checkStream(b, e.js, e.stream, b.N)
	b.ReportMetric(float64(sink.n.Load()-int64(b.N)), "republished")
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "msgs/s")
}

// BenchmarkOutboxPeersLatency: a producer commits one message per transaction,
// 1,000 a second for 3 s, while the relay runs; the commit-to-publish latency of
// each message is from its COMMIT's return to the return of the destination
// publisher's Publish (JetStream acknowledged it). watermill's forwarder polls
// (PollInterval 10 ms; watermill-sql has no NOTIFY); idem's relay is woken by
// LISTEN/NOTIFY (idempg.NewNotifier), and, beside it, polls (10 ms after a round
// that published, doubling up to 1 s while rounds find nothing). The other-tx-1s
// runs repeat the first two while another client holds a transaction (with a
// transaction id) open for 1 s, from the 1,000th message on: a long report, a
// slow migration, an idle-in-transaction session elsewhere on the server.
// Run with -benchtime 1x.
//
//	go test -run '^$' -bench OutboxPeersLatency -benchtime 1x -count 3
func BenchmarkOutboxPeersLatency(b *testing.B) {
	for _, stall := range []bool{false, true} {
		suffix := ""
		if stall {
			suffix = "/other-tx-1s"
		}
		b.Run("watermill-forwarder"+suffix, func(b *testing.B) {
			for b.Loop() {
				reportLatency(b, forwarderLatency(b, stall))
			}
		})
		for _, mode := range []string{"notify", "poll"} {
			if stall && mode == "poll" {
				continue
			}
			b.Run("idem/relay/"+mode+suffix, func(b *testing.B) {
				for b.Loop() {
					reportLatency(b, relayLatency(b, mode == "notify", stall))
				}
			})
		}
	}
}

// holdTx holds a transaction with a transaction id open for d on a connection of
// its own, from another client's point of view an ordinary long transaction.
func holdTx(b *testing.B, d time.Duration) {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, testsvc.PostgresURL())
	if err != nil {
		b.Error(err)
		return
	}
	defer conn.Close(ctx)
	err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_current_xact_id()"); err != nil {
			return err
		}
		time.Sleep(d)
		return nil
	})
	if err != nil {
		b.Error(err)
	}
}

const latRate, latSeconds = 1000, 3

// publishTimes records when each message id was first acknowledged by the broker.
type publishTimes struct {
	mu  sync.Mutex
	at  map[string]time.Time
	all chan struct{}
	n   int
}

func newPublishTimes(n int) *publishTimes {
	return &publishTimes{at: make(map[string]time.Time, n), all: make(chan struct{}), n: n}
}

func (p *publishTimes) record(ids ...string) {
	now := time.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, id := range ids {
		if _, ok := p.at[id]; !ok {
			p.at[id] = now
			if len(p.at) == p.n {
				close(p.all)
			}
		}
	}
}

type timedPublisher struct {
	message.Publisher
	t *publishTimes
}

func (p timedPublisher) Publish(topic string, msgs ...*message.Message) error {
	if err := p.Publisher.Publish(topic, msgs...); err != nil {
		return err
	}
	for _, m := range msgs {
		p.t.record(m.UUID)
	}
	return nil
}

type timedSink struct {
	idem.Sink
	t *publishTimes
}

func (s timedSink) Publish(ctx context.Context, msgs ...idem.Message) error {
	if err := s.Sink.Publish(ctx, msgs...); err != nil {
		return err
	}
	for _, m := range msgs {
		s.t.record(m.ID)
	}
	return nil
}

// latencies is the result of one latency run: per-message latencies, sorted, and
// the rate the producer achieved.
type latencies struct {
	lat  []time.Duration
	rate float64
}

func reportLatency(b *testing.B, l latencies) {
	b.ReportMetric(l.lat[len(l.lat)/2].Seconds()*1000, "p50-ms")
	b.ReportMetric(l.lat[len(l.lat)*99/100].Seconds()*1000, "p99-ms")
	b.ReportMetric(l.rate, "commits/s")
}

// produce commits latRate*latSeconds messages, one per transaction, one per tick of
// a 1/latRate ticker, and returns each id's commit time and the achieved rate. With
// stall, another transaction is held open for 1 s from the latRate-th message on.
func produce(b *testing.B, stall bool, commit func(id string) error) (map[string]time.Time, float64) {
	n := latRate * latSeconds
	committed := make(map[string]time.Time, n)
	tick := time.NewTicker(time.Second / latRate)
	defer tick.Stop()
	start := time.Now()
	var held sync.WaitGroup
	defer held.Wait()
	for i := range n {
		<-tick.C
		if stall && i == latRate {
			held.Go(func() { holdTx(b, time.Second) })
		}
		id := "m-" + strconv.Itoa(i)
		if err := commit(id); err != nil {
			b.Fatal(err)
		}
		committed[id] = time.Now()
	}
	return committed, float64(n) / time.Since(start).Seconds()
}

func collect(b *testing.B, committed map[string]time.Time, rate float64, pt *publishTimes) latencies {
	select {
	case <-pt.all:
	case <-time.After(60 * time.Second):
		b.Fatal("not every message was published within 60 s")
	}
	pt.mu.Lock()
	defer pt.mu.Unlock()
	l := latencies{lat: make([]time.Duration, 0, len(committed)), rate: rate}
	for id, c := range committed {
		l.lat = append(l.lat, max(pt.at[id].Sub(c), 0))
	}
	slices.Sort(l.lat)
	return l
}

func forwarderLatency(b *testing.B, stall bool) latencies {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	e := newForwarderEnv(b)
	pt := newPublishTimes(latRate * latSeconds)
	f := e.forwarder(b, e.subscriber(b), func(p message.Publisher) message.Publisher { return timedPublisher{p, pt} })
	errc := make(chan error, 1)
	go func() { errc <- f.Run(ctx) }()
	defer f.Close()
	<-f.Running()
	time.Sleep(200 * time.Millisecond) // as for idem's relay below
	payload := make([]byte, 100)
	committed, rate := produce(b, stall, func(id string) error {
		tx, err := e.db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		if err := e.enqueueTx(tx, message.NewMessage(id, payload)); err != nil {
			_ = tx.Rollback()
			return err
		}
		return tx.Commit()
	})
	l := collect(b, committed, rate, pt)
	checkStream(b, e.js, e.stream, len(committed))
	return l
}

func relayLatency(b *testing.B, notify, stall bool) latencies {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	e := newRelayEnv(b, 0)
	pt := newPublishTimes(latRate * latSeconds)
	cfg := outbox.RelayConfig{Logger: slog.New(slog.DiscardHandler)}
	if notify {
		n := idempg.NewNotifier(e.pool, "")
		defer n.Close()
		cfg.Notifier = n
	}
	// The relay runs on an Outbox of its own, as in another process: no in-process
	// wake from the producer's EnqueueTx, only NOTIFY or the poll.
	relayOb, err := outbox.New(ctx, idempg.TxDB(e.pool), outbox.Config{})
	if err != nil {
		b.Fatal(err)
	}
	r, err := relayOb.Relay(timedSink{e.sink, pt}, cfg)
	if err != nil {
		b.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() { errc <- r.Run(ctx) }()
	time.Sleep(200 * time.Millisecond) // let it LISTEN (a late LISTEN would only show as latency)
	payload := make([]byte, 100)
	committed, rate := produce(b, stall, func(id string) error {
		return pgx.BeginFunc(ctx, e.pool, func(tx pgx.Tx) error {
			_, err := e.ob.EnqueueTx(ctx, tx, idem.Message{ID: id, Topic: e.subject, Payload: payload})
			return err
		})
	})
	l := collect(b, committed, rate, pt)
	cancel()
	<-errc
	checkStream(b, e.js, e.stream, len(committed))
	return l
}
