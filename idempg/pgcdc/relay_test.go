package pgcdc_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
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

func natsURL() string {
	if u := os.Getenv("IDEM_TEST_NATS_URL"); u != "" {
		return u
	}
	return "nats://127.0.0.1:4222"
}

// bundle is one test's database (in the private logical cluster), outbox and stream.
type bundle struct {
	url     string
	pool    *pgxpool.Pool
	ob      *outbox.Outbox[pgx.Tx]
	js      jetstream.JetStream
	stream  string
	subject string
	sink    idem.Sink
	slot    string         // slot names are the cluster's, not the database's
	logs    testsvc.Buffer // the relays' log where the test gives no Logger: printed if the test fails
}

// cfg is a relay Config on the bundle's slot.
func (b *bundle) cfg(c pgcdc.Config) pgcdc.Config {
	c.Slot = b.slot
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(&b.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return c
}

// noDedup publishes every copy under an ID of its own (the message's ID goes in the
// x-id header): a broker without dedup, so the copies a relay republishes reach the
// stream and the tests see the consumers' dedup, not JetStream's.
type noDedup struct {
	idem.Sink
	n atomic.Int64
}

func (s *noDedup) Publish(ctx context.Context, msgs ...idem.Message) error {
	out := make([]idem.Message, len(msgs))
	for i, m := range msgs {
		h := map[string]string{"x-id": m.ID}
		for k, v := range m.Headers {
			h[k] = v
		}
		m.Headers, m.ID = h, fmt.Sprintf("%s~%d", m.ID, s.n.Add(1))
		out[i] = m
	}
	return s.Sink.Publish(ctx, out...)
}

func setup(t *testing.T) *bundle {
	t.Helper()
	return setupOn(t, testsvc.LogicalPostgres(t))
}

// setupOn is setup on the database at url.
func setupOn(t *testing.T, url string) *bundle {
	t.Helper()
	ctx := context.Background()
	b := &bundle{url: url, slot: testsvc.UniqueName("slot_")}
	t.Cleanup(func() { // last: after the relays stopped
		if t.Failed() {
			t.Logf("the relays' log:\n%s", b.logs.String())
		}
	})
	var err error
	if b.pool, err = pgxpool.New(ctx, b.url); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.pool.Close)
	if b.ob, err = outbox.New(ctx, idempg.TxDB(b.pool), outbox.Config{}); err != nil {
		t.Fatal(err)
	}
	b.js = testsvc.JetStream(t, natsURL())
	b.stream = testsvc.UniqueName("CDC_")
	b.subject = b.stream + ".events"
	if _, err := b.js.CreateStream(ctx, jetstream.StreamConfig{Name: b.stream, Subjects: []string{b.stream + ".>"},
		Storage: jetstream.MemoryStorage}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.js.DeleteStream(context.Background(), b.stream) })
	sink, err := idemnats.NewSink(b.js, idemnats.SinkConfig{})
	if err != nil {
		t.Fatal(err)
	}
	b.sink = &noDedup{Sink: sink}
	return b
}

// enqueue commits n messages, per transactions of per, and returns their IDs.
func (b *bundle) enqueue(t *testing.T, first, n, per int) []string {
	t.Helper()
	ctx := context.Background()
	var ids []string
	for i := first; i < first+n; i += per {
		err := pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
			var msgs []idem.Message
			for j := i; j < min(i+per, first+n); j++ {
				msgs = append(msgs, idem.Message{ID: fmt.Sprintf("m-%05d", j), Topic: b.subject, Payload: []byte(strconv.Itoa(j)),
					Headers: map[string]string{"app": "x"}})
			}
			got, err := b.ob.EnqueueTx(ctx, tx, msgs...)
			ids = append(ids, got...)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return ids
}

// published reads the stream from its start until it holds at least n messages.
func (b *bundle) published(t *testing.T, n int) []idem.Message {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s, err := b.js.Stream(ctx, b.stream)
	if err != nil {
		t.Fatal(err)
	}
	testsvc.Eventually(t, 60*time.Second, fmt.Sprintf("%d messages in the stream", n), func() bool {
		info, err := s.Info(ctx)
		return err == nil && info.State.Msgs >= uint64(n)
	})
	info, _ := s.Info(ctx)
	c, err := s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	var out []idem.Message
	for len(out) < int(info.State.Msgs) {
		batch, err := c.Fetch(int(info.State.Msgs)-len(out), jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		for m := range batch.Messages() {
			h := map[string]string{}
			for k := range m.Headers() {
				h[k] = m.Headers().Get(k)
			}
			out = append(out, idem.Message{ID: m.Headers().Get("x-id"), Topic: m.Subject(), Headers: h, Payload: m.Data()})
		}
		if batch.Error() != nil {
			t.Fatal(batch.Error())
		}
	}
	return out
}

// run starts r and returns a stop function that waits for Run to return.
func run(t *testing.T, r *pgcdc.Relay) (stop func() error) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	var once sync.Once
	var err error
	stop = func() error {
		once.Do(func() { cancel(); err = <-done })
		return err
	}
	t.Cleanup(func() { stop() })
	return stop
}

func quiet() *slog.Logger { return slog.New(slog.DiscardHandler) }

// position is a published message's key in the log.
type position struct{ lsn, index uint64 }

func (p position) less(q position) bool { return p.lsn < q.lsn || p.lsn == q.lsn && p.index < q.index }

func positionOf(t *testing.T, m idem.Message) position {
	t.Helper()
	_, lsn, idx, ok := pgcdc.MessagePosition(m)
	if !ok {
		t.Fatalf("message %s has no position headers: %v", m.ID, m.Headers)
	}
	return position{lsn, idx}
}

// Messages are published once each, in commit order: positions strictly increase
// along the stream, a transaction committed first is published first even when it
// began last, and emitted messages join rows of their transaction in statement order.
func TestRelayPublishesInCommitOrder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	b.revokeEmit(t)
	r, err := pgcdc.New(b.url, b.sink, b.cfg(pgcdc.Config{BatchSize: 7, Messages: true}))
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Setup(ctx); err != nil { // creates the slot: everything after it is relayed
		t.Fatal(err)
	}
	// early begins first and commits last.
	early, err := b.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.ob.EnqueueTx(ctx, early, idem.Message{ID: "early", Topic: b.subject}); err != nil {
		t.Fatal(err)
	}
	b.enqueue(t, 0, 30, 4)
	err = pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		q := idempg.Querier(tx)
		if _, err := pgcdc.EmitTx(ctx, q, idem.Message{ID: "emitted-0", Topic: b.subject, Payload: []byte{0, 1, 2}}); err != nil {
			return err
		}
		if _, err := b.ob.EnqueueTx(ctx, tx, idem.Message{ID: "row-1", Topic: b.subject}); err != nil {
			return err
		}
		_, err := pgcdc.EmitTx(ctx, q, idem.Message{ID: "emitted-2", Topic: b.subject, OrderingKey: "k"})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := early.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	stop := run(t, r)
	got := b.published(t, 34)
	stop()
	if len(got) != 34 {
		t.Fatalf("%d messages published, want 34", len(got))
	}
	for i := 1; i < len(got); i++ {
		if !positionOf(t, got[i-1]).less(positionOf(t, got[i])) {
			t.Fatalf("message %d (%s at %v) is not after %s at %v", i, got[i].ID, positionOf(t, got[i]), got[i-1].ID, positionOf(t, got[i-1]))
		}
	}
	for i := 0; i < 30; i++ {
		if want := fmt.Sprintf("m-%05d", i); got[i].ID != want || string(got[i].Payload) != strconv.Itoa(i) || got[i].Headers["app"] != "x" {
			t.Fatalf("message %d is %s %q %v, want %s", i, got[i].ID, got[i].Payload, got[i].Headers, want)
		}
	}
	if got[30].ID != "emitted-0" || got[31].ID != "row-1" || got[32].ID != "emitted-2" || got[33].ID != "early" {
		t.Fatalf("tail is %s %s %s %s; want emitted-0 row-1 emitted-2 early", got[30].ID, got[31].ID, got[32].ID, got[33].ID)
	}
	if p := positionOf(t, got[32]); p.index != 2 || string(got[30].Payload) != "\x00\x01\x02" {
		t.Fatalf("emitted-2 at index %d, emitted-0 payload %q", p.index, got[30].Payload)
	}
	if src := got[0].Headers[pgcdc.HeaderSource]; src == "" {
		t.Fatal("no source header")
	}
}

// flakySink fails while down is set, and counts what it stored.
type flakySink struct {
	idem.Sink
	down    atomic.Bool
	refused atomic.Int64
	stored  atomic.Int64
}

func (f *flakySink) Publish(ctx context.Context, msgs ...idem.Message) error {
	if f.down.Load() {
		f.refused.Add(1)
		return errors.New("broker down")
	}
	if err := f.Sink.Publish(ctx, msgs...); err != nil {
		return err
	}
	f.stored.Add(int64(len(msgs)))
	return nil
}

// While the broker refuses, the slot's confirmed position does not move: nothing is
// acknowledged to PostgreSQL that the broker did not store. Once it accepts,
// everything is published and confirmed past the last commit.
func TestRelayConfirmsOnlyWhatTheBrokerStored(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	sink := &flakySink{Sink: b.sink}
	sink.down.Store(true)
	r, err := pgcdc.New(b.url, sink, b.cfg(pgcdc.Config{StatusInterval: 20 * time.Millisecond}))
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Setup(ctx); err != nil {
		t.Fatal(err)
	}
	before, err := r.Status(ctx)
	if err != nil || !before.Exists {
		t.Fatalf("status %+v, %v", before, err)
	}
	b.enqueue(t, 0, 20, 5)
	stop := run(t, r)
	// Let the relay fail a few sessions (each one reads the transactions and fails
	// to publish them).
	testsvc.Eventually(t, 60*time.Second, "the relay failing to publish twice", func() bool { return sink.refused.Load() >= 2 })
	// Positions confirmed while the broker is down: the server may confirm up to
	// its WAL position when nothing is pending, but never a commit not stored.
	var whileDown []uint64
	for i := 0; i < 3; i++ {
		st, err := r.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		whileDown = append(whileDown, st.Confirmed)
		time.Sleep(50 * time.Millisecond)
	}
	sink.down.Store(false)
	got := b.published(t, 20)
	for _, c := range whileDown {
		if first := positionOf(t, got[0]).lsn; c > first {
			t.Fatalf("confirmed %s while the broker stored nothing, past the first commit %s", pgcdc.FormatLSN(c), pgcdc.FormatLSN(first))
		}
	}
	var last position
	for _, m := range got {
		if p := positionOf(t, m); last.less(p) {
			last = p
		}
	}
	testsvc.Eventually(t, 30*time.Second, "the slot confirmed past the last commit", func() bool {
		st, _ := r.Status(ctx)
		return st.Confirmed > last.lsn
	})
	stop()
	if len(got) != 20 || sink.stored.Load() != 20 {
		t.Fatalf("%d in the stream, %d stored by the sink; want 20 (nothing republished after the confirm)", len(got), sink.stored.Load())
	}
}

// halfSink accepts the first half of its first batch of several messages and fails
// the rest, saying so (an *idem.PublishError); then it stores everything. It counts
// what reached the broker, by message ID.
type halfSink struct {
	idem.Sink
	cut  atomic.Bool
	mu   sync.Mutex
	sent map[string]int
}

func (h *halfSink) Publish(ctx context.Context, msgs ...idem.Message) error {
	n, cut := len(msgs), false
	if len(msgs) > 1 && h.cut.CompareAndSwap(false, true) {
		n, cut = len(msgs)/2, true
	}
	if err := h.Sink.Publish(ctx, msgs[:n]...); err != nil {
		return err
	}
	h.mu.Lock()
	for _, m := range msgs[:n] {
		h.sent[m.ID]++
	}
	h.mu.Unlock()
	if !cut {
		return nil
	}
	accepted := make([]bool, len(msgs))
	for i := range n {
		accepted[i] = true
	}
	return &idem.PublishError{Accepted: accepted, Err: errors.New("connection lost")}
}

func (h *halfSink) counts() map[string]int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return maps.Clone(h.sent)
}

// A batch the broker accepted in part (idem.PublishError): the relay sends only
// the messages not accepted again, so a broker that keeps every copy gets one of
// each. The relay before it sent the whole batch again, one message at a time.
func TestRelaySendsOnlyWhatWasNotAccepted(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	sink := &halfSink{Sink: b.sink, sent: map[string]int{}}
	// One batch of the 20 messages, whatever the pace of the log: flushed when full.
	r, err := pgcdc.New(b.url, sink, b.cfg(pgcdc.Config{BatchSize: 20, FlushAfter: time.Hour}))
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Setup(ctx); err != nil {
		t.Fatal(err)
	}
	ids := b.enqueue(t, 0, 20, 20)
	run(t, r)
	testsvc.Eventually(t, 60*time.Second, "every message published", func() bool { return len(sink.counts()) == len(ids) })
	if !sink.cut.Load() {
		t.Fatal("the relay published no batch of several messages: the test's premise")
	}
	for id, n := range sink.counts() {
		if n != 1 {
			t.Errorf("message %s reached the broker %d times, want once", id, n)
		}
	}
}
