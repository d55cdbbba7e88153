package idempg_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idempg"
	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/idemtest"
	"github.com/idemhq/idem/inbox"
	"github.com/idemhq/idem/internal/testsvc"
	"github.com/idemhq/idem/outbox"
	"github.com/idemhq/idem/queue"
)

// The tests of this file run idem behind a real PgBouncer in transaction pooling
// (testsvc.PgBouncer): what works there with default_query_exec_mode=exec, and what
// refuses at start with an error naming the setting it needs.

// bounced returns the URL of a fresh database through a private PgBouncer in
// transaction pooling, and the direct URL of the same database.
func bounced(t testing.TB) (pooled, direct string) {
	t.Helper()
	direct = testsvc.PostgresDatabase(t)
	return testsvc.PgBouncer(t, direct), direct
}

// withParam returns raw with the query parameter name=value.
func withParam(t testing.TB, raw, name, value string) string {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set(name, value)
	u.RawQuery = q.Encode()
	return u.String()
}

// bouncerPool opens a pool on raw, closed when t ends.
func bouncerPool(t testing.TB, raw string) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), raw)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// wantInputError fails t unless err is an *idem.InputError whose text names each
// of want.
func wantInputError(t *testing.T, what string, err error, want ...string) {
	t.Helper()
	var ie *idem.InputError
	if !errors.As(err, &ie) {
		t.Fatalf("%s = %v; want an *idem.InputError", what, err)
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("%s = %q; want it to name %q", what, err, w)
		}
	}
}

// The whole Store contract (concurrent claims, takeovers, batches, the
// linearizability check) holds behind PgBouncer in transaction pooling with
// default_query_exec_mode=exec, for both Store and SQLStore. The subtests share one
// database, each on a records table of its own.
func TestPgBouncerStoreSuite(t *testing.T) {
	t.Parallel()
	pooled, _ := bounced(t)
	exec := withParam(t, pooled, "default_query_exec_mode", "exec")
	table := func() idempg.Config { return idempg.Config{Table: testsvc.UniqueName("rec_")} }
	harnesses := map[string]idemtest.Harness{
		"pgx": {New: func(t *testing.T) idem.Store {
			s, err := idempg.New(ctxFor(t), bouncerPool(t, exec), table())
			check(t, err)
			return s
		}},
		"database_sql": {New: func(t *testing.T) idem.Store {
			db, err := sql.Open("pgx", exec)
			check(t, err)
			db.SetMaxOpenConns(8)
			t.Cleanup(func() { db.Close() })
			s, err := idempg.NewSQL(ctxFor(t), db, table())
			check(t, err)
			return s
		}},
	}
	for name, h := range harnesses {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			idemtest.StoreSuite(t, h)
		})
	}
}

// Behind a transaction pooler, a pool or handle that caches statements (pgx's
// default) or runs in describe_exec mode is refused at start with an error naming
// default_query_exec_mode=exec; the same URL in exec, simple_protocol or
// cache_describe mode, and the default mode on a direct connection, start.
func TestPgBouncerRefusesStatementCache(t *testing.T) {
	t.Parallel()
	pooled, direct := bounced(t)
	ctx := ctxFor(t)
	_, err := idempg.New(ctx, bouncerPool(t, pooled), idempg.Config{})
	wantInputError(t, "idempg.New behind PgBouncer with the statement cache", err,
		"idempg.New pool", "transaction", "default_query_exec_mode=exec")

	db, err := sql.Open("pgx", pooled)
	check(t, err)
	defer db.Close()
	_, err = idempg.NewSQL(ctx, db, idempg.Config{})
	wantInputError(t, "idempg.NewSQL behind PgBouncer with the statement cache", err,
		"idempg.NewSQL db", "default_query_exec_mode=exec")

	// The components on a TxDB refuse at New: their migration is its first
	// transaction.
	_, err = outbox.New(ctx, idempg.TxDB(bouncerPool(t, pooled)), outbox.Config{})
	wantInputError(t, "outbox.New on idempg.TxDB behind PgBouncer with the statement cache", err,
		"idempg.TxDB pool", "default_query_exec_mode=exec")

	// describe_exec sends Parse and Bind in two round trips, which the pooler may
	// give to two server sessions.
	_, err = idempg.New(ctx, bouncerPool(t, withParam(t, pooled, "default_query_exec_mode", "describe_exec")), idempg.Config{})
	wantInputError(t, "idempg.New behind PgBouncer in describe_exec mode", err,
		"describe_exec", "default_query_exec_mode=exec")

	for _, mode := range []string{"exec", "simple_protocol", "cache_describe"} {
		if _, err := idempg.New(ctx, bouncerPool(t, withParam(t, pooled, "default_query_exec_mode", mode)), idempg.Config{}); err != nil {
			t.Errorf("idempg.New behind PgBouncer in %s mode = %v; want it to start", mode, err)
		}
	}
	if _, err := idempg.New(ctx, bouncerPool(t, direct), idempg.Config{}); err != nil {
		t.Errorf("idempg.New on the server directly, default mode = %v; want it to start", err)
	}
}

// A Notifier on a pool through the pooler refuses (LISTEN would be lost with its
// transaction's server session) instead of waiting for what cannot come; on a
// direct pool beside it, it hears a NOTIFY sent through the pooler.
func TestPgBouncerNotifier(t *testing.T) {
	t.Parallel()
	pooled, direct := bounced(t)
	ctx := ctxFor(t)
	exec := bouncerPool(t, withParam(t, pooled, "default_query_exec_mode", "exec"))

	n := idempg.NewNotifier(exec, "")
	defer n.Close()
	err := n.Listen(ctx)
	wantInputError(t, "Notifier.Listen through PgBouncer", err, "idempg.NewNotifier pool", "transaction", "direct connection")
	if idem.IsRetryable(err) {
		t.Errorf("Notifier.Listen through PgBouncer = %v; want a permanent error, so the relay polls", err)
	}
	if err := n.Wait(ctx); !errors.Is(err, idem.ErrInvalid) {
		t.Errorf("Notifier.Wait after the refusal = %v; want the same refusal", err)
	}

	dn := idempg.NewNotifier(bouncerPool(t, direct), "")
	defer dn.Close()
	check(t, dn.Listen(ctx))
	if _, err := exec.Exec(ctx, "SELECT pg_notify($1, '')", idempg.DefaultChannel); err != nil {
		t.Fatal(err)
	}
	check(t, dn.Wait(ctx))
}

// The outbox behind PgBouncer: writers enqueue through the pooler, and a relay
// whose Notifier is on the pooled pool logs at start that it cannot listen, polls,
// and publishes every committed message exactly once.
func TestPgBouncerOutboxRelay(t *testing.T) {
	t.Parallel()
	pooled, _ := bounced(t)
	ctx := ctxFor(t)
	pool := bouncerPool(t, withParam(t, pooled, "default_query_exec_mode", "exec"))
	txdb := idempg.TxDB(pool)
	ob, err := outbox.New(ctx, txdb, outbox.Config{})
	check(t, err)

	const writers, each = 4, 50
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				tx, err := pool.Begin(ctx)
				if err == nil {
					_, err = ob.EnqueueTx(ctx, tx, idem.Message{ID: fmt.Sprintf("w%d-%03d", w, i), Topic: "orders", Payload: []byte("x")})
					if err == nil {
						err = tx.Commit(ctx)
					} else {
						_ = tx.Rollback(ctx)
					}
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}

	sink := &countSink{seen: map[string]int{}, all: make(chan struct{})}
	sink.want = writers * each
	var logs testsvc.Buffer
	n := idempg.NewNotifier(pool, "")
	defer n.Close()
	r, err := ob.Relay(sink, outbox.RelayConfig{Notifier: n, PollInterval: 50 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	check(t, err)
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(rctx) }()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("enqueue through PgBouncer: %v", err)
	}
	select {
	case <-sink.all:
	case <-ctx.Done():
		t.Fatalf("the relay published %d of %d messages before the test's deadline", sink.distinct(), sink.want)
	}
	// One more round finds nothing left: nothing is published twice.
	if n, err := r.RunOnce(ctx); err != nil || n != 0 {
		t.Errorf("RunOnce after all were published = %d, %v; want 0, nil", n, err)
	}
	// The listening goroutine says it polls; on a loaded machine it may say so
	// after the messages went out, so wait for it (bounded by ctx) before stopping.
	waitForLog(ctx, &logs, "polling only")
	stop()
	<-done
	if d := sink.doubled(); d != 0 {
		t.Errorf("%d messages published more than once", d)
	}
	if got := sink.distinct(); got != sink.want {
		t.Errorf("published %d distinct messages, want %d", got, sink.want)
	}
	if !strings.Contains(logs.String(), "polling only") || !strings.Contains(logs.String(), "direct connection") {
		t.Errorf("relay log does not say it polls only:\n%s", logs.String())
	}
}

// waitForLog returns once logs contain want, or ctx ends.
func waitForLog(ctx context.Context, logs *testsvc.Buffer, want string) {
	for !strings.Contains(logs.String(), want) && ctx.Err() == nil {
		time.Sleep(10 * time.Millisecond)
	}
}

// countSink counts what it is given, per message ID; all is closed once want
// distinct messages arrived.
type countSink struct {
	mu   sync.Mutex
	seen map[string]int
	want int
	all  chan struct{}
}

func (s *countSink) Publish(_ context.Context, msgs ...idem.Message) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	before := len(s.seen)
	for _, m := range msgs {
		s.seen[m.ID]++
	}
	if before < s.want && len(s.seen) >= s.want {
		close(s.all)
	}
	return nil
}

func (s *countSink) distinct() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.seen)
}

func (s *countSink) doubled() (n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.seen {
		if c > 1 {
			n++
		}
	}
	return n
}

// The database as a queue behind PgBouncer: producers enqueue through the pooler,
// two consumers (queue Source + inbox on idempg.Store, all on pooled pools in exec
// mode) apply every message exactly once. Their Notifiers are on the pooled pool,
// so each Source logs that it cannot listen and finds the messages by polling.
func TestPgBouncerQueueInbox(t *testing.T) {
	t.Parallel()
	pooled, _ := bounced(t)
	ctx := ctxFor(t)
	exec := withParam(t, pooled, "default_query_exec_mode", "exec")
	pool := bouncerPool(t, exec)
	if _, err := pool.Exec(ctx, "CREATE TABLE effects (msg_id text NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	var logs testsvc.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	q, err := queue.New(ctx, idempg.TxDB(pool), queue.Config{Logger: log})
	check(t, err)

	const producers, each = 4, 50
	const total = producers * each
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	var consumers sync.WaitGroup
	for c := range 2 {
		cpool := bouncerPool(t, exec) // a process of its own, as it were
		txdb := idempg.TxDB(cpool)
		store, err := idempg.New(ctx, cpool, idempg.Config{})
		check(t, err)
		n := idempg.NewNotifier(cpool, idemsql.QueueNotifyChannel)
		t.Cleanup(n.Close)
		cq, err := queue.New(ctx, txdb, queue.Config{Logger: log})
		check(t, err)
		src, err := cq.Source(queue.SourceConfig{Topic: "orders", Notifier: n})
		check(t, err)
		t.Cleanup(func() { src.Close() })
		consumer, err := inbox.New(ctx, src, txdb, store, func(ctx context.Context, tx pgx.Tx, m idem.Message) error {
			_, err := tx.Exec(ctx, "INSERT INTO effects (msg_id) VALUES ($1)", m.ID)
			return err
		}, inbox.Config{Consumer: "orders", Logger: log})
		check(t, err)
		consumers.Add(1)
		go func() {
			defer consumers.Done()
			if err := consumer.Run(runCtx); err != nil && runCtx.Err() == nil {
				t.Errorf("consumer %d: %v", c, err)
			}
		}()
	}

	var producing sync.WaitGroup
	for p := range producers {
		producing.Add(1)
		go func() {
			defer producing.Done()
			for i := range each {
				tx, err := pool.Begin(ctx)
				if err == nil {
					_, err = q.EnqueueTx(ctx, tx, idem.Message{ID: fmt.Sprintf("p%d-%03d", p, i), Topic: "orders", Payload: []byte("x")})
					if err == nil {
						err = tx.Commit(ctx)
					} else {
						_ = tx.Rollback(ctx)
					}
				}
				if err != nil {
					t.Errorf("enqueue through PgBouncer: %v", err)
					return
				}
			}
		}()
	}
	producing.Wait()
	// Progress, not time: wait until every message was applied (bounded by ctx).
	var applied, distinct int
	for {
		if err := pool.QueryRow(ctx, "SELECT count(*), count(DISTINCT msg_id) FROM effects").Scan(&applied, &distinct); err != nil {
			t.Fatalf("count effects: %v", err)
		}
		if distinct == total || ctx.Err() != nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	waitForLog(ctx, &logs, "polling only") // as in TestPgBouncerOutboxRelay
	stop()
	consumers.Wait()
	if err := pool.QueryRow(context.Background(), "SELECT count(*), count(DISTINCT msg_id) FROM effects").Scan(&applied, &distinct); err != nil {
		t.Fatal(err)
	}
	if distinct != total || applied != total {
		t.Errorf("effects: %d applied, %d distinct; want each of the %d messages applied exactly once", applied, distinct, total)
	}
	if !strings.Contains(logs.String(), "polling only") || !strings.Contains(logs.String(), "direct connection") {
		t.Errorf("the Sources' log does not say they poll only:\n%s", logs.String())
	}
}
