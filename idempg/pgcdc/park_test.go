package pgcdc_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idempg"
	"github.com/idemhq/idem/idempg/pgcdc"
	"github.com/idemhq/idem/internal/testsvc"
	"github.com/idemhq/idem/outbox"
)

// running is a relay started by watch.
type running struct {
	stop func() error
	mu   sync.Mutex
	done chan error
	err  error
	over bool
}

// watch starts r; ended reports whether Run has returned, and what.
func watch(t *testing.T, r *pgcdc.Relay) *running {
	ctx, cancel := context.WithCancel(context.Background())
	w := &running{done: make(chan error, 1)}
	go func() { w.done <- r.Run(ctx) }()
	var once sync.Once
	w.stop = func() error {
		once.Do(func() {
			cancel()
			w.ended(true)
		})
		return w.err
	}
	t.Cleanup(func() { w.stop() })
	return w
}

func (w *running) ended(block bool) (bool, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.over {
		return true, w.err
	}
	if block {
		w.err, w.over = <-w.done, true
		return true, w.err
	}
	select {
	case w.err = <-w.done:
		w.over = true
	default:
	}
	return w.over, w.err
}

// alive fails t if Run has returned.
func (w *running) alive(t *testing.T) {
	t.Helper()
	if over, err := w.ended(false); over {
		t.Fatalf("Run returned %v; the relay should have gone on", err)
	}
}

// relay is a relay to sink on the bundle's slot, set up (the slot exists: what is
// committed from now on is relayed).
func (b *bundle) relay(t *testing.T, sink idem.Sink, c pgcdc.Config) *pgcdc.Relay {
	t.Helper()
	r, err := pgcdc.New(b.url, sink, b.cfg(c))
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Setup(context.Background()); err != nil {
		t.Fatal(err)
	}
	return r
}

// commit enqueues msgs in one transaction.
func (b *bundle) commit(t *testing.T, msgs ...idem.Message) {
	t.Helper()
	ctx := context.Background()
	if err := pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		_, err := b.ob.EnqueueTx(ctx, tx, msgs...)
		return err
	}); err != nil {
		t.Fatal(err)
	}
}

// rawRow inserts an outbox row by hand, as another team's service would.
func (b *bundle) rawRow(t *testing.T, msgID, topic, headers string) {
	t.Helper()
	if _, err := b.pool.Exec(context.Background(), `INSERT INTO idem_outbox (msg_id, topic, part, headers, payload, created_at, available_at)
		VALUES ($1, $2, 0, $3, '', 0, 0)`, msgID, topic, headers); err != nil {
		t.Fatal(err)
	}
}

// emitRaw writes a WAL message of the outbox's prefix through q, as any role with
// EXECUTE on pg_logical_emit_message can.
func emitRaw(t *testing.T, q interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}, content string) {
	t.Helper()
	if _, err := q.Exec(context.Background(), "SELECT pg_logical_emit_message(true, $1, $2::text)", pgcdc.EmitPrefix, content); err != nil {
		t.Fatal(err)
	}
}

// parkedRow is a message the relay parked in the outbox table.
type parkedRow struct {
	id            int64
	msgID, reason string
}

func (b *bundle) parkedRows(t *testing.T) []parkedRow {
	t.Helper()
	rows, err := b.pool.Query(context.Background(), "SELECT id, msg_id, last_error FROM idem_outbox WHERE parked_at IS NOT NULL ORDER BY id")
	if err != nil {
		t.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (p parkedRow, err error) {
		return p, r.Scan(&p.id, &p.msgID, &p.reason)
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// currentLSN is the server's WAL position.
func (b *bundle) currentLSN(t *testing.T) uint64 {
	t.Helper()
	var s string
	if err := b.pool.QueryRow(context.Background(), "SELECT pg_current_wal_lsn()::text").Scan(&s); err != nil {
		t.Fatal(err)
	}
	return mustLSN(t, s)
}

// publishedIDs waits until the stream holds want messages, failing at once if the
// relay stopped, and returns their IDs in order.
func (b *bundle) publishedIDs(t *testing.T, w *running, want int) []string {
	t.Helper()
	s, err := b.js.Stream(context.Background(), b.stream)
	if err != nil {
		t.Fatal(err)
	}
	testsvc.Eventually(t, 60*time.Second, fmt.Sprintf("%d messages in the stream", want), func() bool {
		w.alive(t)
		info, err := s.Info(context.Background())
		return err == nil && info.State.Msgs >= uint64(want)
	})
	var ids []string
	for _, m := range b.published(t, want) {
		ids = append(ids, m.ID)
	}
	return ids
}

// Rows and WAL messages the relay cannot publish (undecodable, invalid, refused by
// the sink as invalid) are parked in the outbox table with their reason, and the
// relay goes on: every message around them is published, in order, the slot moves
// past them, and an operator can retry or discard them.
func TestUnpublishableMessagesAreParked(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	b.revokeEmit(t) // WAL messages on: only roles that may write the outbox may write them
	reg := prometheus.NewRegistry()
	r := b.relay(t, b.sink, pgcdc.Config{Messages: true, Registerer: reg})
	b.enqueue(t, 0, 3, 3)
	b.rawRow(t, "bad-headers", b.subject, "not json")
	b.rawRow(t, "", b.subject, "{}")
	b.rawRow(t, "bad-topic", b.subject+".*", "{}") // a wildcard: the sink refuses it
	b.commit(t, idem.Message{ID: "m-00003", Topic: b.subject},
		idem.Message{ID: "crlf", Topic: b.subject, Headers: map[string]string{"x": "a\r\nb"}}, // the sink refuses it
		idem.Message{ID: "m-00004", Topic: b.subject})
	emitRaw(t, b.pool, "not json")
	emitRaw(t, b.pool, `{"id":"no-topic","topic":"","payload":""}`)
	b.enqueue(t, 5, 2, 1)
	end := b.currentLSN(t)

	w := watch(t, r)
	got := b.publishedIDs(t, w, 7)
	if want := "m-00000 m-00001 m-00002 m-00003 m-00004 m-00005 m-00006"; strings.Join(got, " ") != want {
		t.Fatalf("published %v, want %s", got, want)
	}
	testsvc.Eventually(t, 30*time.Second, "the slot confirmed past the last commit", func() bool {
		w.alive(t)
		st, err := r.Status(ctx)
		return err == nil && st.Confirmed >= end
	})
	parked := b.parkedRows(t)
	wants := []struct{ id, reason string }{
		{"bad-headers", "headers are not a JSON object of strings"},
		{"", "Message.ID is empty"},
		{"bad-topic", "wildcard"},
		{"crlf", "line break"},
		{"", "not idem's encoding (the parked payload holds it as written)"},
		{"no-topic", "Message.Topic is empty"},
	}
	if len(parked) != len(wants) {
		t.Fatalf("parked %+v, want %d", parked, len(wants))
	}
	for i, p := range parked {
		if p.msgID != wants[i].id || !strings.Contains(p.reason, wants[i].reason) ||
			!regexp.MustCompile(`^cdc relay: message \d of the transaction committed at [0-9A-F]+/[0-9A-F]+: `).MatchString(p.reason) {
			t.Errorf("parked %d: %q %q, want %q with a reason naming %q and its place", i, p.msgID, p.reason, wants[i].id, wants[i].reason)
		}
	}
	if h := r.Health(); h.Parked != 6 || !h.WaitingSince.IsZero() || h.LastPublished.IsZero() {
		t.Errorf("Health = %+v, want 6 parked, none waiting", h)
	}
	if n := gauge(t, reg, "idem_cdc_parked_total"); n != 6 {
		t.Errorf("idem_cdc_parked_total = %v, want 6", n)
	}

	// The operator retries one: it goes back in line as a new row, which the relay
	// reads; the sink refuses it again, so it is parked again, and then discarded.
	a := outbox.NewAdmin(idempg.TxDB(b.pool))
	if err := a.Retry(ctx, parked[3].id); err != nil {
		t.Fatal(err)
	}
	var again parkedRow
	testsvc.Eventually(t, 30*time.Second, "the retried message parked again", func() bool {
		w.alive(t)
		for _, p := range b.parkedRows(t) {
			if p.msgID == "crlf" {
				again = p
			}
		}
		return again.id > parked[3].id
	})
	if err := a.Discard(ctx, again.id, "a header the broker cannot carry"); err != nil {
		t.Fatal(err)
	}
	b.enqueue(t, 7, 1, 1)
	if got := b.publishedIDs(t, w, 8); got[7] != "m-00007" {
		t.Fatalf("after the retry, published %v", got)
	}
}

// refusingSink fails every message whose topic starts with refuse as a broker
// would that has no stream for it, and counts them.
type refusingSink struct {
	idem.Sink
	refuse string
	mu     sync.Mutex
	tries  int
}

// refusing is a refusingSink over the bundle's sink, and the topic prefix it refuses.
func (b *bundle) refusing() (*refusingSink, string) {
	other := testsvc.UniqueName("OTHER_")
	return &refusingSink{Sink: b.sink, refuse: other}, other
}

func (s *refusingSink) Publish(ctx context.Context, msgs ...idem.Message) error {
	for _, m := range msgs {
		if strings.HasPrefix(m.Topic, s.refuse) {
			s.mu.Lock()
			s.tries++
			s.mu.Unlock()
			return &idem.BackendError{Backend: "nats", Op: "publish", Err: jetstream.ErrNoStreamResponse}
		}
	}
	return s.Sink.Publish(ctx, msgs...)
}

func (s *refusingSink) attempts() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.tries
}

// A message the broker keeps refusing with an error that is not the message's
// (here: no stream for its topic) is retried, and parks nothing while nothing goes
// through, as during a broker outage; health says messages wait. Once a message
// after it is published, it is parked after MaxAttempts, and the relay goes on.
// When the operator has fixed the broker, Retry publishes it.
func TestMessageTheBrokerKeepsRefusingIsParkedOnceOthersGoThrough(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	sink, other := b.refusing()
	r := b.relay(t, sink, pgcdc.Config{MaxAttempts: 3})
	b.commit(t, idem.Message{ID: "elsewhere", Topic: other + ".events"})
	w := watch(t, r)
	testsvc.Eventually(t, 60*time.Second, "five attempts", func() bool { w.alive(t); return sink.attempts() >= 5 })
	if p := b.parkedRows(t); len(p) != 0 {
		t.Fatalf("parked %+v while nothing went through", p)
	}
	h := r.Health()
	if h.WaitingSince.IsZero() || h.LastError == nil {
		t.Fatalf("Health = %+v, want a message waiting and the last error", h)
	}
	if what, _ := h.Stalled(h.WaitingSince.Add(time.Minute), 30*time.Second); what != "messages wait and none was published" {
		t.Fatalf("Stalled a minute after = %q", what)
	}

	b.enqueue(t, 0, 1, 1)
	if got := b.publishedIDs(t, w, 1); got[0] != "m-00000" {
		t.Fatalf("published %v", got)
	}
	var parked []parkedRow
	testsvc.Eventually(t, 30*time.Second, "the refused message parked", func() bool { parked = b.parkedRows(t); return len(parked) == 1 })
	if parked[0].msgID != "elsewhere" || !strings.Contains(parked[0].reason, "no response from stream") {
		t.Fatalf("parked %+v", parked)
	}
	// The broker is fixed (the stream exists now: the sink stops refusing), and the
	// operator retries it.
	sink.mu.Lock()
	sink.refuse = "\x00none"
	sink.mu.Unlock()
	if _, err := b.js.CreateStream(ctx, jetstream.StreamConfig{Name: other, Subjects: []string{other + ".>"}, Storage: jetstream.MemoryStorage}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.js.DeleteStream(context.Background(), other) })
	if err := outbox.NewAdmin(idempg.TxDB(b.pool)).Retry(ctx, parked[0].id); err != nil {
		t.Fatal(err)
	}
	s, err := b.js.Stream(ctx, other)
	if err != nil {
		t.Fatal(err)
	}
	testsvc.Eventually(t, 30*time.Second, "the retried message published", func() bool {
		w.alive(t)
		info, err := s.Info(ctx)
		return err == nil && info.State.Msgs == 1
	})
}

// A message that keeps failing with nothing after it is reported with the way to
// skip its transaction, and following that advice skips it: the next relay
// publishes what comes after it and never tries it again.
func TestStuckMessageSkipAdviceWorks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	sink, other := b.refusing()
	var logs testsvc.Buffer
	r := b.relay(t, sink, pgcdc.Config{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	b.commit(t, idem.Message{ID: "stuck", Topic: other + ".events"}, idem.Message{ID: "with-it", Topic: b.subject})
	advice := regexp.MustCompile(`SELECT pg_replication_slot_advance\('` + b.slot + `', '[0-9A-F]+/[0-9A-F]+'\)`)
	w := watch(t, r)
	testsvc.Eventually(t, 60*time.Second, "the advice in the log", func() bool { w.alive(t); return advice.MatchString(logs.String()) })
	if err := w.stop(); err != context.Canceled {
		t.Fatalf("Run = %v", err)
	}
	tried := sink.attempts()
	t.Logf("advice: %s", advice.FindString(logs.String()))
	// The server ends the stopped relay's walsender a moment after it disconnects.
	testsvc.Eventually(t, 30*time.Second, "following the advice", func() bool {
		_, err := b.pool.Exec(ctx, advice.FindString(logs.String()))
		var pe *pgconn.PgError
		if err != nil && !(errors.As(err, &pe) && pe.Code == "55006") {
			t.Fatalf("following the advice: %v", err)
		}
		return err == nil
	})
	b.enqueue(t, 0, 1, 1)
	w = watch(t, r)
	if got := b.publishedIDs(t, w, 1); got[0] != "m-00000" {
		t.Fatalf("after the skip, published %v; want m-00000 alone", got)
	}
	if sink.attempts() != tried {
		t.Fatalf("the skipped message was tried again (%d attempts, %d before)", sink.attempts(), tried)
	}
}
