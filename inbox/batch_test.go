package inbox_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"go.opentelemetry.io/otel/trace"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemseq"
	"github.com/idemhq/idem/inbox"
	"github.com/idemhq/idem/internal/otelx"
	"github.com/idemhq/idem/internal/sqltest"
)

// forEachKind runs fn on SQLite, PostgreSQL and MySQL, each a fresh database with a
// ledger table. Its SQL takes $1 placeholders on every kind (sqltest.Open).
func forEachKind(t *testing.T, fn func(t *testing.T, b bundle)) {
	for _, kind := range []string{"sqlite", "postgres", "mysql"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			d := sqltest.Open(t, kind)
			if _, err := d.DB.Exec("CREATE TABLE ledger (msg_id VARCHAR(64) NOT NULL, amount BIGINT NOT NULL)"); err != nil {
				t.Fatal(err)
			}
			fn(t, bundle{db: d.DB, txdb: d.Tx, store: d.Store})
		})
	}
}

// creditAll is credit for a batch: one multi-row INSERT for all its messages. A
// payload that is not an order fails the whole call, permanently.
func creditAll(ctx context.Context, tx *sql.Tx, ms []idem.Message) error {
	var q strings.Builder
	q.WriteString("INSERT INTO ledger (msg_id, amount) VALUES ")
	args := make([]any, 0, 2*len(ms))
	for i, m := range ms {
		var p struct{ Amount int64 }
		if err := json.Unmarshal(m.Payload, &p); err != nil {
			return inbox.Permanent(fmt.Errorf("message %s is not an order: %w", m.ID, err))
		}
		if i > 0 {
			q.WriteString(", ")
		}
		fmt.Fprintf(&q, "($%d, $%d)", 2*i+1, 2*i+2)
		args = append(args, m.ID, p.Amount)
	}
	_, err := tx.ExecContext(ctx, q.String(), args...)
	return err
}

// calls records the messages of each call of a batch handler.
type calls struct {
	mu  sync.Mutex
	ids [][]string
}

func (c *calls) wrap(h inbox.BatchHandler[*sql.Tx]) inbox.BatchHandler[*sql.Tx] {
	return func(ctx context.Context, tx *sql.Tx, ms []idem.Message) error {
		ids := make([]string, len(ms))
		for i, m := range ms {
			ids[i] = m.ID
		}
		c.mu.Lock()
		c.ids = append(c.ids, ids)
		c.mu.Unlock()
		return h(ctx, tx, ms)
	}
}

func (c *calls) take() [][]string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.ids
	c.ids = nil
	return out
}

func newBatchConsumer(t *testing.T, b bundle, src idem.Source, h inbox.BatchHandler[*sql.Tx], cfg inbox.Config) *inbox.Consumer[*sql.Tx] {
	t.Helper()
	cfg.Consumer = "ledger"
	cfg.Backoff = noBackoff
	cfg.Logger = slog.New(slog.DiscardHandler) // lost acks are warned of
	c, err := inbox.NewBatch(context.Background(), src, b.txdb, b.store, h, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// receive takes up to n deliveries from fb, all it holds when it holds no more.
func receive(t *testing.T, fb *fakeBroker, n int) []idem.Delivery {
	t.Helper()
	ds, err := fb.Receive(context.Background(), n)
	if err != nil {
		t.Fatal(err)
	}
	return ds
}

// TestBatchHandlerSeesFreshOnly: in one batch with messages applied before, a
// message twice, and one without a key, the handler is called once, with exactly
// the fresh messages in delivery order; a batch of duplicates only calls it not at
// all.
func TestBatchHandlerSeesFreshOnly(t *testing.T) {
	t.Parallel()
	forEachKind(t, func(t *testing.T, b bundle) {
		ctx := context.Background()
		fb := newFakeBroker()
		var log calls
		c := newBatchConsumer(t, b, fb, log.wrap(creditAll), inbox.Config{BatchSize: 64})
		publishOrders(fb, 10, 1)
		c.Process(ctx, receive(t, fb, 64))
		if got := log.take(); len(got) != 1 || len(got[0]) != 10 {
			t.Fatalf("first batch: calls %q, want one of 10 messages", got)
		}

		var want []string
		for i := range 40 {
			fb.Publish(ctx, order(i)) // 0..9 were applied: duplicates
			if i == 20 {
				fb.Publish(ctx, order(i))             // twice in the batch: the second a duplicate
				fb.Publish(ctx, idem.Message{ID: ""}) // no key: dead-lettered before any claim
			}
			if i >= 10 {
				want = append(want, order(i).ID)
			}
		}
		c.Process(ctx, receive(t, fb, 64))
		if got := log.take(); len(got) != 1 || !slices.Equal(got[0], want) {
			t.Fatalf("second batch: calls %q\nwant one call with %q", got, want)
		}
		exactLedger(t, b.db, 40, "after the second batch")
		settledAll(t, fb) // each message applied, a duplicate or dead

		publishOrders(fb, 40, 1) // all applied
		c.Process(ctx, receive(t, fb, 64))
		if got := log.take(); len(got) != 0 {
			t.Fatalf("a batch of duplicates called the handler: %q", got)
		}
		if err := fb.waitSettled(ctx); err != nil {
			t.Fatal(err)
		}
		if dls, err := c.DeadLetters(ctx, 10); err != nil || len(dls) != 1 || dls[0].Kind != "no_key" {
			t.Fatalf("dead letters %+v, %v; want the message without a key", dls, err)
		}
	})
}

// TestBatchHandlerPoisonMessage: one undecodable message in a batch of 64 fails the
// handler's one call; the batch runs again a message at a time, so that message
// alone is dead-lettered and the 63 others are applied once.
func TestBatchHandlerPoisonMessage(t *testing.T) {
	t.Parallel()
	forEachKind(t, func(t *testing.T, b bundle) {
		ctx := context.Background()
		fb := newFakeBroker()
		var log calls
		c := newBatchConsumer(t, b, fb, log.wrap(creditAll), inbox.Config{BatchSize: 64})
		for i := range 64 {
			m := order(i)
			if i == 37 {
				m.Payload = []byte("not json")
			}
			fb.Publish(ctx, m)
		}
		c.Process(ctx, receive(t, fb, 64))
		ackedOnce(t, fb, 64) // the poison message too: nothing comes again
		got := log.take()
		if len(got) != 65 || len(got[0]) != 64 {
			t.Fatalf("%d calls (the first of %d messages); want one of 64, then 64 of one each", len(got), len(got[0]))
		}
		rows, distinct, sum := ledger(t, b.db)
		if rows != 63 || distinct != 63 || sum != 64*65/2-38 {
			t.Fatalf("ledger has %d rows (%d distinct), sum %d; want the 63 good orders once, sum %d", rows, distinct, sum, 64*65/2-38)
		}
		dls, err := c.DeadLetters(ctx, 10)
		if err != nil || len(dls) != 1 || dls[0].Message.ID != order(37).ID || dls[0].Kind != "permanent" {
			t.Fatalf("dead letters %+v, %v; want %s, permanent", dls, err, order(37).ID)
		}
	})
}

// TestBatchHandlerTransientFailure: a message that fails once is retried and then
// applied once; the others of its batch are applied once, on the first delivery.
func TestBatchHandlerTransientFailure(t *testing.T) {
	t.Parallel()
	forEachKind(t, func(t *testing.T, b bundle) {
		var failed atomic.Bool
		flaky := func(ctx context.Context, tx *sql.Tx, ms []idem.Message) error {
			for _, m := range ms {
				if m.ID == order(5).ID && failed.CompareAndSwap(false, true) {
					return errTransient
				}
			}
			return creditAll(ctx, tx, ms)
		}
		fb := newFakeBroker()
		c := newBatchConsumer(t, b, fb, flaky, inbox.Config{BatchSize: 64})
		publishOrders(fb, 64, 1)
		drain(t, c, fb)
		exactLedger(t, b.db, 64, "after the retry")
		if !failed.Load() {
			t.Fatal("the handler never failed")
		}
		if dls, err := c.DeadLetters(context.Background(), 10); err != nil || len(dls) != 0 {
			t.Fatalf("dead letters %+v, %v; want none", dls, err)
		}
		ackedOnce(t, fb, 64)
	})
}

// settledAll fails t unless fb holds nothing: every message it was given settled.
func settledAll(t *testing.T, fb *fakeBroker) {
	t.Helper()
	fb.mu.Lock()
	defer fb.mu.Unlock()
	if len(fb.queue) != 0 || len(fb.inflight) != 0 {
		t.Errorf("the broker holds %d queued and %d unsettled messages, want none", len(fb.queue), len(fb.inflight))
	}
}

// ackedOnce fails t unless fb holds nothing and acked orders 0..n-1 once each.
func ackedOnce(t *testing.T, fb *fakeBroker, n int) {
	t.Helper()
	settledAll(t, fb)
	fb.mu.Lock()
	defer fb.mu.Unlock()
	var wrong []string
	for i := range n {
		if k := fb.acked[order(i).ID]; k != 1 {
			wrong = append(wrong, fmt.Sprintf("%s %d times", order(i).ID, k))
		}
	}
	if len(wrong) > 0 {
		t.Errorf("%d of %d orders not acked once: %s", len(wrong), n, strings.Join(wrong, ", "))
	}
}

// TestBatchHandlerConcurrentConsumers: four consumers on one source, every message
// published twice and some acks lost, apply every message once.
func TestBatchHandlerConcurrentConsumers(t *testing.T) {
	t.Parallel()
	forEachKind(t, func(t *testing.T, b bundle) {
		const n = 300
		fb := newFakeBroker()
		publishOrders(fb, n, 2)
		fb.loseAcks = 40
		var cs []func(context.Context) error
		for range 4 {
			cs = append(cs, newBatchConsumer(t, b, fb, creditAll, inbox.Config{BatchSize: 32, MaxAttempts: 100}).Run)
		}
		drainAny(t, fb, cs...)
		exactLedger(t, b.db, n, "after four consumers")
	})
}

func TestNewBatchNilHandler(t *testing.T) {
	t.Parallel()
	b := sqliteBundle(t)
	_, err := inbox.NewBatch(context.Background(), newFakeBroker(), b.txdb, b.store, nil, inbox.Config{Consumer: "c"})
	var ie *idem.InputError
	if !errors.As(err, &ie) || ie.Field != "handle" {
		t.Fatalf("NewBatch with a nil handler = %v, want an InputError on handle", err)
	}
}

// TestBatchHandlerSpans: a batch handler's one call still gives each fresh delivery
// its idem.inbox.process span with one idem.inbox.apply child, and a duplicate its
// idem.inbox.duplicate span with no apply span.
func TestBatchHandlerSpans(t *testing.T) {
	t.Parallel()
	b := sqliteBundle(t)
	ctx := context.Background()
	tr := newTracer(t)
	fb := newFakeBroker()
	var log calls
	c := newBatchConsumer(t, b, fb, log.wrap(creditAll), inbox.Config{BatchSize: 64, TracerProvider: tr.tp})
	fb.Publish(ctx, order(0))
	c.Process(ctx, receive(t, fb, 64))
	tr.exp.Reset()
	fb.Publish(ctx, order(1), order(0), order(2), order(3))
	c.Process(ctx, receive(t, fb, 64))
	if got := log.take(); len(got) != 2 || len(got[1]) != 3 {
		t.Fatalf("calls %q, want the second of 3 messages", got)
	}
	process := map[trace.SpanID]string{} // process span -> message id
	applies := map[string]int{}          // message id -> apply spans under its process span
	var dups int
	spans := tr.exp.GetSpans()
	for _, s := range spans {
		switch s.Name {
		case otelx.SpanInboxProcess:
			for _, a := range s.Attributes {
				if a.Key == otelx.KeyKey {
					process[s.SpanContext.SpanID()] = a.Value.AsString()
				}
			}
		case otelx.SpanInboxSuppress:
			dups++
		}
	}
	for _, s := range spans {
		if s.Name == otelx.SpanInboxApply {
			applies[process[s.Parent.SpanID()]]++
		}
	}
	want := map[string]int{order(1).ID: 1, order(2).ID: 1, order(3).ID: 1}
	if len(process) != 3 || dups != 1 || fmt.Sprint(applies) != fmt.Sprint(want) {
		t.Fatalf("%d process spans, %d duplicate spans, apply spans by message %v; want 3, 1 and %v", len(process), dups, applies, want)
	}
}

// TestBatchHandlerSequences: messages deduplicated by position join the batch's
// call like the others, redeliveries left out.
func TestBatchHandlerSequences(t *testing.T) {
	t.Parallel()
	forEachKind(t, func(t *testing.T, b bundle) {
		ctx := context.Background()
		tracker, err := idemseq.OpenSQL(ctx, b.db, idemseq.Config{Scope: "ledger"})
		if err != nil {
			t.Fatal(err)
		}
		fb := newFakeBroker()
		c, err := inbox.NewBatch(ctx, fb, b.txdb, b.store, creditAll,
			inbox.Config{Consumer: "ledger", BatchSize: 8, Backoff: noBackoff, Logger: slog.New(slog.DiscardHandler)},
			inbox.WithSequences[*sql.Tx](tracker, partitionOffset))
		if err != nil {
			t.Fatal(err)
		}
		const n = 40
		for i := range n {
			m := order(i)
			m.Headers = map[string]string{"partition": fmt.Sprint(i % 2), "offset": fmt.Sprint(i / 2)}
			fb.Publish(ctx, m, m)
		}
		fb.loseAcks = 10
		drain(t, c, fb)
		exactLedger(t, b.db, n, "after the redeliveries")
	})
}
