package audit_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemnats"
	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/inbox"
	"github.com/idemhq/idem/internal/sqltest"
	"github.com/idemhq/idem/internal/testsvc"
	"github.com/idemhq/idem/migrate"
	"github.com/idemhq/idem/outbox"
)

// waitLong only ends a test that hangs: the waits below are for progress.
const waitLong = 2 * time.Minute

var quiet = slog.New(slog.DiscardHandler)

// database is one database of a flow: its handle (taking $1 placeholders on
// every kind, for the test's own SQL), its TxDB and its key store.
type database struct {
	kind  string
	db    *sql.DB
	tx    idemsql.TxDB[*sql.Tx]
	store idem.TxStore[*sql.Tx]
}

func openDB(t testing.TB, kind string) *database {
	t.Helper()
	o := sqltest.Open(t, kind)
	return &database{kind: kind, db: o.DB, tx: o.Tx, store: o.Store}
}

func (d *database) exec(t testing.TB, query string, args ...any) {
	t.Helper()
	if _, err := d.db.ExecContext(context.Background(), query, args...); err != nil {
		t.Fatalf("%s: %s: %v", d.kind, query, err)
	}
}

func (d *database) count(t testing.TB, query string, args ...any) (n int) {
	t.Helper()
	if err := d.db.QueryRowContext(context.Background(), query, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %s: %v", d.kind, query, err)
	}
	return n
}

// clock is the audit's Config.Now, set by the test: "published longer ago than
// Grace" without sleeping, and two runs at the same instant.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = t
}

func (c *clock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// lossySink is a broker that acknowledges and loses the first publication of the
// chosen message ids: the relay marks them published, no consumer sees them. A
// later publication of the same id (a repair's copy) passes.
type lossySink struct {
	idem.Sink
	lose func(id string) bool
	mu   sync.Mutex
	lost map[string]bool
}

func (s *lossySink) Publish(ctx context.Context, msgs ...idem.Message) error {
	s.mu.Lock()
	kept := msgs[:0:0]
	for _, m := range msgs {
		if s.lose(m.ID) && !s.lost[m.ID] {
			s.lost[m.ID] = true
			continue
		}
		kept = append(kept, m)
	}
	s.mu.Unlock()
	if len(kept) == 0 {
		return nil
	}
	return s.Sink.Publish(ctx, kept...)
}

// lossySource loses, for its consumer only, the first delivery of the chosen
// message ids: it acks them and hands them to nobody.
type lossySource struct {
	idem.Source
	lose func(id string) bool
	lost map[string]bool // Receive is called by one goroutine
}

func (s *lossySource) Receive(ctx context.Context, max int) ([]idem.Delivery, error) {
	ds, err := s.Source.Receive(ctx, max)
	kept := ds[:0:0]
	for _, d := range ds {
		if s.lose(d.ID) && !s.lost[d.ID] {
			s.lost[d.ID] = true
			if err := d.Settler.Ack(ctx); err != nil {
				return nil, err
			}
			continue
		}
		kept = append(kept, d)
	}
	return kept, err
}

// flow is a producer's outbox relayed to a JetStream stream of its own, through
// a sink that loses what the test chooses.
type flow struct {
	t      *testing.T
	prod   *database
	ob     *outbox.Outbox[*sql.Tx]
	js     jetstream.JetStream
	stream string
	topic  string
	sink   *lossySink

	mu        sync.Mutex
	stopRelay func()
}

func newFlow(t *testing.T, prod *database, lose func(id string) bool) *flow {
	t.Helper()
	ctx := context.Background()
	js := testsvc.JetStream(t, "nats://127.0.0.1:4222")
	f := &flow{t: t, prod: prod, js: js, stream: testsvc.UniqueName("AUDIT_"), topic: testsvc.UniqueName("audit.")}
	// A dedup window well below the audits' grace (as Config.Grace asks): a
	// repair's copy of a message the stream stored, under the same id, is
	// published after it, not dropped as a duplicate.
	cfg := idemnats.StreamConfig{Name: f.stream, Subjects: []string{f.topic}, Duplicates: dedupWindow}
	if _, err := idemnats.EnsureStream(ctx, js, cfg); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { js.DeleteStream(context.Background(), f.stream) })
	sink, err := idemnats.NewSink(js, idemnats.SinkConfig{})
	if err != nil {
		t.Fatal(err)
	}
	f.sink = &lossySink{Sink: sink, lose: lose, lost: map[string]bool{}}
	if f.ob, err = outbox.New(ctx, prod.tx, outbox.Config{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.relayOff)
	return f
}

// enqueue writes n messages msg-0000 … in transactions of up to 100.
func (f *flow) enqueue(n int) []string {
	f.t.Helper()
	ctx := context.Background()
	var ids []string
	for i := 0; i < n; {
		tx, err := f.prod.db.BeginTx(ctx, nil)
		if err != nil {
			f.t.Fatal(err)
		}
		var msgs []idem.Message
		for ; i < n && len(msgs) < 100; i++ {
			id := msgID(i)
			msgs = append(msgs, idem.Message{ID: id, Topic: f.topic, Payload: []byte(id)})
			ids = append(ids, id)
		}
		if _, err := f.ob.EnqueueTx(ctx, tx, msgs...); err != nil {
			tx.Rollback()
			f.t.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			f.t.Fatal(err)
		}
	}
	return ids
}

func msgID(i int) string { return fmt.Sprintf("msg-%04d", i) }

func (f *flow) relayOn() {
	f.t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.stopRelay != nil {
		return
	}
	r, err := f.ob.Relay(f.sink, outbox.RelayConfig{BatchSize: 100, PollInterval: 20 * time.Millisecond, Logger: quiet})
	if err != nil {
		f.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := r.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
			f.t.Errorf("relay: %v", err)
		}
	}()
	f.stopRelay = func() { cancel(); <-done }
}

// dedupWindow is the flows' JetStream dedup window.
const dedupWindow = 200 * time.Millisecond

// relayOnForCopies starts the relay once the stream has forgotten the ids of
// the messages published so far: the wall-clock wait Config.Grace stands for
// in production (a grace above the broker's duplicate window), which the
// audits' clock skips. The server purges its ids by a timer, so three windows.
func (f *flow) relayOnForCopies() {
	f.t.Helper()
	var last int64
	if err := f.prod.db.QueryRow("SELECT MAX(published_at) FROM idem_outbox").Scan(&last); err != nil {
		f.t.Fatal(err)
	}
	eventually(f.t, "the stream's dedup window to pass", func() bool {
		return time.Since(time.UnixMilli(last)) > 3*dedupWindow
	})
	f.relayOn()
}

func (f *flow) relayOff() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.stopRelay != nil {
		f.stopRelay()
		f.stopRelay = nil
	}
}

// pending counts the outbox rows not yet published.
func (f *flow) pending() int {
	return f.prod.count(f.t, "SELECT COUNT(*) FROM idem_outbox WHERE published_at IS NULL")
}

// consumer is an inbox consumer of the flow's stream, applying into a ledger
// table of its database.
type consumer struct {
	name  string
	db    *database
	table string
	reg   *prometheus.Registry
}

type consumerOpts struct {
	lose       func(id string) bool // the deliveries this consumer loses once
	deadLetter func(id string) bool // the messages its handler refuses for good
}

func (f *flow) consume(name string, d *database, o consumerOpts) *consumer {
	t := f.t
	t.Helper()
	ctx := context.Background()
	c := &consumer{name: name, db: d, table: "ledger_" + name, reg: prometheus.NewRegistry()}
	d.exec(t, "CREATE TABLE "+c.table+" (msg_id VARCHAR(64) NOT NULL)")
	nsrc, err := idemnats.NewSource(ctx, f.js, idemnats.SourceConfig{Stream: f.stream, Durable: name})
	if err != nil {
		t.Fatal(err)
	}
	var src idem.Source = nsrc
	if o.lose != nil {
		src = &lossySource{Source: nsrc, lose: o.lose, lost: map[string]bool{}}
	}
	cons, err := inbox.New(ctx, src, d.tx, d.store, func(ctx context.Context, tx *sql.Tx, m idem.Message) error {
		if o.deadLetter != nil && o.deadLetter(m.ID) {
			return inbox.Permanent(fmt.Errorf("%s refuses %s", name, m.ID))
		}
		_, err := tx.ExecContext(ctx, "INSERT INTO "+c.table+" (msg_id) VALUES ($1)", m.ID)
		return err
	}, inbox.Config{Consumer: name, BatchSize: 50, Registerer: c.reg, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := cons.Run(runCtx); err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("consumer %s: %v", name, err)
		}
	}()
	t.Cleanup(func() { cancel(); <-done; nsrc.Close() })
	return c
}

// ledger returns the consumer's applied rows and distinct ids.
func (c *consumer) ledger(t testing.TB) (rows, distinct int) {
	t.Helper()
	if err := c.db.db.QueryRow("SELECT COUNT(*), COUNT(DISTINCT msg_id) FROM "+c.table).Scan(&rows, &distinct); err != nil {
		t.Fatal(err)
	}
	return rows, distinct
}

func (c *consumer) waitLedger(t testing.TB, want int) {
	t.Helper()
	testsvc.Eventually(t, waitLong, fmt.Sprintf("consumer %s to apply %d messages", c.name, want), func() bool {
		rows, _ := c.ledger(t)
		return rows >= want
	})
	if rows, distinct := c.ledger(t); rows != want || distinct != want {
		t.Fatalf("consumer %s's ledger: %d rows, %d distinct; want %d once each", c.name, rows, distinct, want)
	}
}

func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	testsvc.Eventually(t, waitLong, what, cond)
}

// seedPublished writes n published messages of topic straight into prod's outbox
// (its migrations applied first), msgID(i) created at created and published at
// at(i), 250 rows a statement.
func seedPublished(t testing.TB, prod *database, topic string, n int, created int64, at func(i int) int64) {
	t.Helper()
	if _, err := outbox.New(context.Background(), prod.tx, outbox.Config{}); err != nil { // its migrations
		t.Fatal(err)
	}
	for from := 0; from < n; from += 250 {
		var (
			values []string
			args   []any
		)
		for i := from; i < min(from+250, n); i++ {
			p := len(args)
			values = append(values, fmt.Sprintf("($%d, $%d, '', 0, '{}', $%d, $%d, $%d, 1, $%d)", p+1, p+2, p+3, p+4, p+5, p+6))
			args = append(args, msgID(i), topic, []byte("payload"), created, created, at(i))
		}
		prod.exec(t, `INSERT INTO idem_outbox (msg_id, topic, ordering_key, part, headers, payload, created_at, available_at,
			attempts, published_at) VALUES `+strings.Join(values, ", "), args...)
	}
}

// applyKeys records, in one transaction of cons (its inbox migrations applied
// first, as an inbox would), that consumer applied msgID(i) for each i where
// applied(i), and returns how many.
func applyKeys(t testing.TB, cons *database, consumer string, n int, applied func(i int) bool) (count int) {
	t.Helper()
	ctx := context.Background()
	if err := migrate.Ensure(ctx, cons.tx, false, migrate.Inbox); err != nil {
		t.Fatal(err)
	}
	err := cons.tx.InTx(ctx, func(tx *sql.Tx) error {
		count = 0
		for i := range n {
			if !applied(i) {
				continue
			}
			k := idem.Key{Scope: consumer, ID: msgID(i)}
			res, err := cons.store.ClaimTx(ctx, tx, idem.Claim{Key: k, Lease: time.Minute, Retention: 24 * time.Hour})
			if err != nil {
				return err
			}
			if err := cons.store.CompleteTx(ctx, tx, k, res.Token, nil); err != nil {
				return err
			}
			count++
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return count
}

// forEachKind runs test once per kind of producer database, in parallel.
func forEachKind(t *testing.T, test func(t *testing.T, kind string)) {
	for _, kind := range []string{"sqlite", "postgres", "mysql"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			test(t, kind)
		})
	}
}
