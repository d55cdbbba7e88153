package outbox_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"
	"github.com/prometheus/client_golang/prometheus"
	_ "modernc.org/sqlite"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/idemtest"
	"github.com/idemhq/idem/internal/sqltest"
	"github.com/idemhq/idem/internal/testsvc"
	"github.com/idemhq/idem/outbox"
)

// memSink records what it is given; fail makes Publish fail (after recording nothing).
type memSink struct {
	mu   sync.Mutex
	got  []idem.Message
	fail func(m idem.Message) error
}

func (s *memSink) Publish(_ context.Context, msgs ...idem.Message) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, m := range msgs {
		if s.fail != nil {
			if err := s.fail(m); err != nil {
				return err
			}
		}
	}
	s.got = append(s.got, msgs...)
	return nil
}

func (s *memSink) ids() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]string, len(s.got))
	for i, m := range s.got {
		out[i] = m.ID
	}
	return out
}

type env struct {
	name string
	db   *sql.DB
	tx   idemsql.TxDB[*sql.Tx]
	ob   *outbox.Outbox[*sql.Tx]
}

func openSQLite(t testing.TB) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+filepath.Join(t.TempDir(), "outbox.db")+
		"?_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)&_pragma=busy_timeout(10000)&_txlock=immediate")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func openPostgres(t testing.TB) *sql.DB {
	t.Helper()
	return testsvc.PostgresDB(t)
}

func newEnv(t testing.TB, name string, db *sql.DB) env {
	t.Helper()
	ctx := context.Background()
	tdb, err := idemsql.SQLDB(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	ob, err := outbox.New(ctx, tdb, outbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, "CREATE TABLE orders (id VARCHAR(255) PRIMARY KEY)"); err != nil {
		t.Fatal(err)
	}
	return env{name: name, db: db, tx: tdb, ob: ob}
}

func forEachDB(t *testing.T, fn func(t *testing.T, e env)) {
	t.Run("sqlite", func(t *testing.T) { t.Parallel(); fn(t, newEnv(t, "sqlite", openSQLite(t))) })
	t.Run("postgres", func(t *testing.T) { t.Parallel(); fn(t, newEnv(t, "postgres", openPostgres(t))) })
	t.Run("mysql", func(t *testing.T) { t.Parallel(); fn(t, newEnv(t, "mysql", sqltest.MySQLDollarDB(t))) })
}

// placeOrder is the business write: an order row and its event, in one transaction.
func placeOrder(ctx context.Context, e env, id, key string, commit bool) error {
	tx, err := e.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, "INSERT INTO orders (id) VALUES ($1)", id); err != nil {
		return err
	}
	if _, err := e.ob.EnqueueTx(ctx, tx, idem.Message{ID: id, Topic: "orders", OrderingKey: key,
		Headers: map[string]string{"k": key}, Payload: []byte(id)}); err != nil {
		return err
	}
	if !commit {
		return nil
	}
	return tx.Commit()
}

func drainRelay(t *testing.T, r *outbox.Relay[*sql.Tx]) {
	t.Helper()
	for i := 0; i < 1000; i++ {
		n, err := r.RunOnce(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			return
		}
	}
	t.Fatal("relay did not drain")
}

func TestRollbackPublishesNothingCommitPublishesAll(t *testing.T) {
	t.Parallel()
	forEachDB(t, func(t *testing.T, e env) {
		ctx := context.Background()
		for i := 0; i < 50; i++ {
			if err := placeOrder(ctx, e, fmt.Sprintf("order-%03d", i), "", i%2 == 0); err != nil {
				t.Fatal(err)
			}
		}
		sink := &memSink{}
		reg := prometheus.NewRegistry()
		r, err := e.ob.Relay(sink, outbox.RelayConfig{BatchSize: 7, Registerer: reg})
		if err != nil {
			t.Fatal(err)
		}
		if got := idemtest.MetricValue(t, reg, "idem_outbox_unpublished", nil); got != 25 {
			t.Errorf("idem_outbox_unpublished before the relay = %v, want 25", got)
		}
		drainRelay(t, r)
		ids := sink.ids()
		if len(ids) != 25 {
			t.Fatalf("published %d messages, want the 25 committed ones", len(ids))
		}
		slices.Sort(ids) // without an ordering key, no order is promised
		for i, id := range ids {
			if want := fmt.Sprintf("order-%03d", 2*i); id != want {
				t.Fatalf("published %v; want exactly the committed orders", ids)
			}
		}
		if got := idemtest.MetricValue(t, reg, "idem_relay_published_total", nil); got != 25 {
			t.Errorf("idem_relay_published_total = %v, want 25", got)
		}
		if got := idemtest.MetricValue(t, reg, "idem_outbox_unpublished", nil); got != 0 {
			t.Errorf("idem_outbox_unpublished after = %v, want 0", got)
		}
	})
}

func TestEnqueueGeneratesIDsAndRefusesBadMessages(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "sqlite", openSQLite(t))
	ctx := context.Background()
	tx, err := e.db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	ids, err := e.ob.EnqueueTx(ctx, tx, idem.Message{Topic: "t"}, idem.Message{Topic: "t"})
	if err != nil || len(ids) != 2 || ids[0] == "" || ids[0] == ids[1] {
		t.Fatalf("EnqueueTx without IDs = %v, %v; want two fresh ids", ids, err)
	}
	for _, m := range []idem.Message{{ID: "x"}, {ID: "x\x00", Topic: "t"}, {ID: "x", Topic: "t", Payload: make([]byte, idem.MaxPayload+1)}} {
		if _, err := e.ob.EnqueueTx(ctx, tx, m); !errors.Is(err, idem.ErrInvalid) {
			t.Errorf("EnqueueTx(%q, topic %q, %d bytes) = %v, want idem.ErrInvalid", m.ID, m.Topic, len(m.Payload), err)
		}
	}
}

// TestFailuresBackOffHoldTheKeyAndPark: a failing message backs off and holds back
// the later messages of its key, not the others; after MaxAttempts it is parked,
// listed, and Retry publishes it.
func TestFailuresBackOffHoldTheKeyAndPark(t *testing.T) {
	t.Parallel()
	forEachDB(t, func(t *testing.T, e env) {
		ctx := context.Background()
		placeOrder(ctx, e, "a1", "a", true)
		placeOrder(ctx, e, "a2", "a", true)
		placeOrder(ctx, e, "b1", "b", true)
		broken := true
		sink := &memSink{fail: func(m idem.Message) error {
			if m.ID == "a1" && broken {
				return errors.New("broker refused a1")
			}
			return nil
		}}
		r, err := e.ob.Relay(sink, outbox.RelayConfig{BatchSize: 1, MaxAttempts: 3, Backoff: func(int) time.Duration { return time.Hour }})
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 4; i++ {
			if _, err := r.RunOnce(ctx); err != nil {
				t.Fatal(err)
			}
		}
		if got := sink.ids(); len(got) != 1 || got[0] != "b1" {
			t.Fatalf("published %v while a1 backs off; want only b1 (a2 waits behind a1)", got)
		}
		for i := 0; i < 5; i++ { // a1 fails until parked (its backoff cut short here); a2 then goes
			if _, err := e.db.Exec("UPDATE idem_outbox SET available_at = 0 WHERE msg_id = 'a1'"); err != nil {
				t.Fatal(err)
			}
			if _, err := r.RunOnce(ctx); err != nil {
				t.Fatal(err)
			}
		}
		parked, err := e.ob.Parked(ctx, 10)
		if err != nil || len(parked) != 1 || parked[0].Message.ID != "a1" || parked[0].Attempts != 3 || parked[0].LastError != "broker refused a1" {
			t.Fatalf("Parked = %+v, %v; want a1 after 3 attempts with its error", parked, err)
		}
		if got := sink.ids(); len(got) != 2 || got[1] != "a2" {
			t.Fatalf("published %v; want a2 after a1 was parked", got)
		}
		broken = false
		if err := e.ob.Retry(ctx, parked[0].ID); err != nil {
			t.Fatal(err)
		}
		if err := e.ob.Retry(ctx, parked[0].ID); !errors.Is(err, outbox.ErrNotParked) {
			t.Fatalf("second Retry = %v, want ErrNotParked", err)
		}
		drainRelay(t, r)
		if got := sink.ids(); len(got) != 3 || got[2] != "a1" {
			t.Fatalf("published %v; want a1 after Retry", got)
		}
	})
}

func TestCleanupDeletesOldPublishedRows(t *testing.T) {
	t.Parallel()
	forEachDB(t, func(t *testing.T, e env) {
		ctx := context.Background()
		for i := 0; i < 30; i++ {
			placeOrder(ctx, e, fmt.Sprintf("o%d", i), "", true)
		}
		r, err := e.ob.Relay(&memSink{}, outbox.RelayConfig{Retention: time.Nanosecond, CleanupBatch: 7})
		if err != nil {
			t.Fatal(err)
		}
		drainRelay(t, r)
		placeOrder(ctx, e, "unpublished", "", true)
		time.Sleep(5 * time.Millisecond)
		n, err := r.Cleanup(ctx)
		if err != nil || n != 30 {
			t.Fatalf("Cleanup = %d, %v; want 30", n, err)
		}
		var left int
		e.db.QueryRow("SELECT COUNT(*) FROM idem_outbox").Scan(&left)
		if left != 1 {
			t.Fatalf("%d rows left, want the 1 unpublished", left)
		}
	})
}

// TestPoisonMessageAlone: a batch whose publication fails is sent again one message at
// a time; only the bad message pays an attempt, and its key's later message waits.
func TestPoisonMessageAlone(t *testing.T) {
	t.Parallel()
	forEachDB(t, func(t *testing.T, e env) {
		ctx := context.Background()
		for _, o := range [][2]string{{"x1", "x"}, {"bad", "y"}, {"y2", "y"}, {"z1", "z"}} {
			placeOrder(ctx, e, o[0], o[1], true)
		}
		sink := &memSink{fail: func(m idem.Message) error {
			if m.ID == "bad" {
				return errors.New("rejected")
			}
			return nil
		}}
		r, err := e.ob.Relay(sink, outbox.RelayConfig{BatchSize: 10, Backoff: func(int) time.Duration { return time.Hour }})
		if err != nil {
			t.Fatal(err)
		}
		if n, err := r.RunOnce(ctx); err != nil || n != 2 {
			t.Fatalf("RunOnce = %d, %v; want x1 and z1 published", n, err)
		}
		got := sink.ids()
		slices.Sort(got)
		if !slices.Equal(got, []string{"x1", "z1"}) {
			t.Fatalf("published %v, want x1 and z1 (y2 waits behind bad)", got)
		}
		var attempts, y2 int
		e.db.QueryRow("SELECT attempts FROM idem_outbox WHERE msg_id = 'bad'").Scan(&attempts)
		e.db.QueryRow("SELECT attempts FROM idem_outbox WHERE msg_id = 'y2'").Scan(&y2)
		if attempts != 1 || y2 != 0 {
			t.Fatalf("attempts: bad %d, y2 %d; want 1 and 0", attempts, y2)
		}
	})
}

// partialSink accepts, in a batch of several, every message but those named
// "cut-…", and says so with an idem.PublishError, as a broker connection cut
// after some confirms would; alone, every message goes through.
type partialSink struct{ memSink }

func (s *partialSink) Publish(ctx context.Context, msgs ...idem.Message) error {
	if len(msgs) == 1 {
		return s.memSink.Publish(ctx, msgs...)
	}
	acc := make([]bool, len(msgs))
	for i, m := range msgs {
		if acc[i] = !strings.HasPrefix(m.ID, "cut-"); acc[i] {
			_ = s.memSink.Publish(ctx, m)
		}
	}
	return &idem.PublishError{Accepted: acc, Err: errors.New("connection cut")}
}

// A batch the sink accepted in part (idem.PublishError): the accepted messages are
// marked published as they are, and only the others are sent again, so the broker
// gets each message once.
func TestPartialPublishSendsOnlyTheRest(t *testing.T) {
	t.Parallel()
	forEachDB(t, func(t *testing.T, e env) {
		ctx := context.Background()
		ids := []string{"a1", "cut-b", "c1", "cut-d", "e1"}
		for i, id := range ids {
			placeOrder(ctx, e, id, fmt.Sprint("k", i), true)
		}
		sink := &partialSink{}
		r, err := e.ob.Relay(sink, outbox.RelayConfig{BatchSize: 10, Backoff: func(int) time.Duration { return time.Hour }})
		if err != nil {
			t.Fatal(err)
		}
		if n, err := r.RunOnce(ctx); err != nil || n != len(ids) {
			t.Fatalf("RunOnce = %d, %v; want all %d published", n, err, len(ids))
		}
		got := sink.ids()
		slices.Sort(got)
		want := slices.Clone(ids)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Fatalf("the broker got %v, want each of %v once", got, want)
		}
		var waiting, attempts int
		if err := e.db.QueryRow("SELECT COUNT(*), COALESCE(SUM(attempts), 0) FROM idem_outbox WHERE published_at IS NULL OR attempts > 0").Scan(&waiting, &attempts); err != nil {
			t.Fatal(err)
		}
		if waiting != 0 || attempts != 0 {
			t.Fatalf("%d rows unpublished or with failed attempts (%d attempts), want none", waiting, attempts)
		}
	})
}

// On SQLite the relay publishes with no transaction open, so the application can
// write while a publish is in flight: a slow broker must not stall every writer.
func TestSQLiteRelayDoesNotHoldTheWriteLockWhilePublishing(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "sqlite", openSQLite(t))
	ctx := context.Background()
	if err := placeOrder(ctx, e, "o-1", "", true); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	var writeErr error
	sink := &memSink{fail: func(idem.Message) error {
		once.Do(func() { writeErr = placeOrder(ctx, e, "o-2", "", true) }) // the app writes mid-publish
		return nil
	}}
	relay, err := e.ob.Relay(sink, outbox.RelayConfig{})
	if err != nil {
		t.Fatal(err)
	}
	drainRelay(t, relay)
	if writeErr != nil {
		t.Fatalf("a business write during the publish failed: %v", writeErr)
	}
	if got := sink.ids(); len(got) != 2 || got[0] != "o-1" || got[1] != "o-2" {
		t.Fatalf("published %v, want [o-1 o-2]", got)
	}
}

// Without a Notifier, a relay in another process (here another Outbox, so no
// in-process wake) still finds new messages: it polls, 10 ms after a round that
// published and backing off while idle, long before a PollInterval of an hour.
func TestRelayWithoutNotifierPolls(t *testing.T) {
	t.Parallel()
	forEachDB(t, func(t *testing.T, e env) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		relayOb, err := outbox.New(ctx, e.tx, outbox.Config{})
		if err != nil {
			t.Fatal(err)
		}
		sink := &memSink{}
		r, err := relayOb.Relay(sink, outbox.RelayConfig{PollInterval: time.Hour, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		// p0 is there before the relay starts; p1 and p2 come while it waits between
		// rounds that find nothing.
		if err := placeOrder(ctx, e, "p0", "", true); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- r.Run(ctx) }()
		testsvc.Eventually(t, 20*time.Second, "the relay's first round", func() bool { return len(sink.ids()) == 1 })
		for i, id := range []string{"p1", "p2"} {
			if err := placeOrder(ctx, e, id, "", true); err != nil {
				t.Fatal(err)
			}
			testsvc.Eventually(t, 20*time.Second, "the relay to poll "+id, func() bool { return len(sink.ids()) == i+2 })
		}
		cancel()
		<-done
	})
}

// TestPipelinedRound: on PostgreSQL a round publishes batch after batch of its
// partitions, each sent while the previous one is marked. A failed batch ends the
// round, with the batches before it marked and the one read behind it untouched;
// a relay killed mid-round marks nothing, and the next round publishes the round's
// messages again.
func TestPipelinedRound(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	setup := func(t *testing.T) env {
		e := newEnv(t, "postgres", openPostgres(t))
		for i := 1; i <= 7; i++ { // one key: one partition, whatever the round locks
			if err := placeOrder(ctx, e, fmt.Sprint("m", i), "k", true); err != nil {
				t.Fatal(err)
			}
		}
		return e
	}
	published := func(t *testing.T, e env) []string {
		rows, err := e.db.Query("SELECT msg_id FROM idem_outbox WHERE published_at IS NOT NULL ORDER BY id")
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var ids []string
		for rows.Next() {
			var id string
			rows.Scan(&id)
			ids = append(ids, id)
		}
		return ids
	}
	t.Run("whole-backlog", func(t *testing.T) {
		t.Parallel()
		e := setup(t)
		sink := &memSink{}
		r, err := e.ob.Relay(sink, outbox.RelayConfig{BatchSize: 2})
		if err != nil {
			t.Fatal(err)
		}
		if n, err := r.RunOnce(ctx); err != nil || n != 7 {
			t.Fatalf("RunOnce = %d, %v; want the 7 messages in one round of 4 batches", n, err)
		}
		want := []string{"m1", "m2", "m3", "m4", "m5", "m6", "m7"}
		if got := sink.ids(); !slices.Equal(got, want) {
			t.Fatalf("published %v, want %v in order", got, want)
		}
		if got := published(t, e); !slices.Equal(got, want) {
			t.Fatalf("marked %v, want %v", got, want)
		}
	})
	t.Run("failed-batch", func(t *testing.T) {
		t.Parallel()
		e := setup(t)
		sink := &memSink{fail: func(m idem.Message) error {
			if m.ID == "m3" {
				return errors.New("rejected")
			}
			return nil
		}}
		r, err := e.ob.Relay(sink, outbox.RelayConfig{BatchSize: 2, Backoff: func(int) time.Duration { return time.Hour }})
		if err != nil {
			t.Fatal(err)
		}
		if n, err := r.RunOnce(ctx); err != nil || n != 2 {
			t.Fatalf("RunOnce = %d, %v; want m1 and m2 (m3 fails, m4 and later wait behind it)", n, err)
		}
		if got := sink.ids(); !slices.Equal(got, []string{"m1", "m2"}) {
			t.Fatalf("published %v, want m1 and m2", got)
		}
		if got := published(t, e); !slices.Equal(got, []string{"m1", "m2"}) {
			t.Fatalf("marked %v, want m1 and m2", got)
		}
		var attempts int
		e.db.QueryRow("SELECT attempts FROM idem_outbox WHERE msg_id = 'm3'").Scan(&attempts)
		if attempts != 1 {
			t.Fatalf("m3 has %d attempts, want 1", attempts)
		}
	})
	t.Run("cut-mid-round", func(t *testing.T) {
		// The round's connection is cut (its backend terminated) while the third
		// batch is at the broker: the round fails, and the messages the broker
		// acknowledged are marked in a transaction of their own instead of being
		// published again.
		t.Parallel()
		e := setup(t)
		var pid int
		sink := &memSink{fail: func(m idem.Message) error {
			if m.ID == "m5" && pid == 0 {
				// The round's transaction waits for this publish, idle: the only
				// backend of the test's schema in that state. The backend says so
				// once it has sent the batch and waits for the next statement,
				// which may be after the relay has the batch: look until it does
				// (the round waits for this publish, so it will).
				// (This runs on the relay's goroutine: no t.Fatal here.)
				var err error
				for deadline := time.Now().Add(time.Minute); ; time.Sleep(5 * time.Millisecond) {
					err = e.db.QueryRow("SELECT pid FROM pg_stat_activity WHERE state = 'idle in transaction' AND query LIKE '%idem_outbox%' " +
						"AND pid <> pg_backend_pid() AND datname = current_database() AND backend_xid IS NOT NULL AND " +
						"pid IN (SELECT pid FROM pg_locks l JOIN pg_class c ON c.oid = l.relation JOIN pg_namespace n ON n.oid = c.relnamespace " +
						"WHERE n.nspname = current_schema() AND c.relname = 'idem_outbox') LIMIT 1").Scan(&pid)
					if !errors.Is(err, sql.ErrNoRows) || time.Now().After(deadline) {
						break
					}
				}
				if err == nil {
					_, err = e.db.Exec("SELECT pg_terminate_backend($1)", pid)
				}
				if err != nil {
					t.Errorf("cutting the round's connection: %v", err)
				}
			}
			return nil
		}}
		r, err := e.ob.Relay(sink, outbox.RelayConfig{BatchSize: 2})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := r.RunOnce(ctx); err == nil {
			t.Fatal("RunOnce of a round whose connection was cut succeeded")
		}
		// The round goes on until Postgres has seen the cut: up to m6 or m7.
		acked := sink.ids()
		if got := published(t, e); len(acked) < 6 || !slices.Equal(got, acked) {
			t.Fatalf("marked %v after the cut, want what the broker acknowledged: %v", got, acked)
		}
		drainRelay(t, r)
		if got := sink.ids(); !slices.Equal(got, []string{"m1", "m2", "m3", "m4", "m5", "m6", "m7"}) {
			t.Fatalf("published %v; want each of the 7 once, in order", got)
		}
	})
	t.Run("killed-mid-round", func(t *testing.T) {
		t.Parallel()
		e := setup(t)
		life, kill := context.WithCancel(ctx)
		defer kill()
		sink := &memSink{fail: func(m idem.Message) error {
			if m.ID == "m4" { // the second batch reached the broker; the relay dies
				kill()
			}
			return nil
		}}
		r, err := e.ob.Relay(sink, outbox.RelayConfig{BatchSize: 2})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := r.RunOnce(life); err == nil {
			t.Fatal("RunOnce of a relay killed mid-round succeeded")
		}
		if got := published(t, e); len(got) != 0 {
			t.Fatalf("marked %v after the relay was killed mid-round, want nothing", got)
		}
		sink.fail = nil
		// The killed round's connection holds its partition lock until Postgres has
		// seen the connection go: until then a round finds the partition taken and
		// publishes nothing, as a restarted relay would, and the next round runs.
		var n int
		deadline := time.Now().Add(30 * time.Second)
		for n == 0 && err == nil && time.Now().Before(deadline) {
			n, err = r.RunOnce(ctx)
			if n == 0 {
				time.Sleep(10 * time.Millisecond)
			}
		}
		if err != nil || n != 7 {
			t.Fatalf("RunOnce after the kill = %d, %v; want all 7 published again", n, err)
		}
		if got := sink.ids(); len(got) < 9 || !slices.Equal(got[len(got)-7:], []string{"m1", "m2", "m3", "m4", "m5", "m6", "m7"}) {
			t.Fatalf("published %v; want the killed round's messages, then all 7 in order", got)
		}
	})
}
