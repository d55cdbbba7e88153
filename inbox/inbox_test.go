package inbox_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemkey"
	"github.com/idemhq/idem/idempg"
	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/idemsqlite"
	"github.com/idemhq/idem/idemtest"
	"github.com/idemhq/idem/inbox"
	"github.com/idemhq/idem/internal/testsvc"
)

// bundle is one database with a ledger table, its TxDB and key store.
type bundle struct {
	db    *sql.DB
	txdb  idemsql.TxDB[*sql.Tx]
	store idem.TxStore[*sql.Tx]
}

func forEachDB(t *testing.T, fn func(t *testing.T, b bundle)) {
	t.Run("sqlite", func(t *testing.T) { t.Parallel(); fn(t, sqliteBundle(t)) })
	t.Run("postgres", func(t *testing.T) { t.Parallel(); fn(t, postgresBundle(t)) })
}

func sqliteBundle(t *testing.T) bundle {
	t.Helper()
	s, err := idemsqlite.Open(context.Background(), filepath.Join(t.TempDir(), "inbox.db"), idemsqlite.Config{Synchronous: idemsqlite.SyncNormal})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return finishBundle(t, s.DB(), s)
}

func postgresBundle(t *testing.T) bundle {
	t.Helper()
	db := testsvc.PostgresDB(t)
	s, err := idempg.NewSQL(context.Background(), db, idempg.Config{})
	if err != nil {
		t.Fatal(err)
	}
	return finishBundle(t, db, s)
}

func finishBundle(t *testing.T, db *sql.DB, s idem.TxStore[*sql.Tx]) bundle {
	t.Helper()
	ctx := context.Background()
	if _, err := db.ExecContext(ctx, "CREATE TABLE ledger (msg_id TEXT NOT NULL, amount BIGINT NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	txdb, err := idemsql.SQLDB(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	return bundle{db: db, txdb: txdb, store: s}
}

// credit is the effect under test: one ledger row per message, amount from the payload.
func credit(ctx context.Context, tx *sql.Tx, m idem.Message) error {
	var p struct{ Amount int64 }
	if err := json.Unmarshal(m.Payload, &p); err != nil {
		return inbox.Permanent(fmt.Errorf("payload is not an order: %w", err))
	}
	_, err := tx.ExecContext(ctx, "INSERT INTO ledger (msg_id, amount) VALUES ($1, $2)", m.ID, p.Amount)
	return err
}

func order(i int) idem.Message {
	return idem.Message{ID: fmt.Sprintf("order-%05d", i), Topic: "orders", Headers: map[string]string{"i": fmt.Sprint(i)},
		Payload: []byte(fmt.Sprintf(`{"Amount":%d}`, i+1))}
}

// ledgerQuery counts the ledger's rows and distinct messages and sums their
// amounts. Its row scans alike from database/sql and from pgx (ledgerCounts).
const ledgerQuery = "SELECT COUNT(*), COUNT(DISTINCT msg_id), COALESCE(SUM(amount), 0) FROM ledger"

// ledgerCounts scans row, a row of ledgerQuery, failing t on an error.
func ledgerCounts(t *testing.T, row interface{ Scan(...any) error }) (rows, distinct int, sum int64) {
	t.Helper()
	if err := row.Scan(&rows, &distinct, &sum); err != nil {
		t.Fatal(err)
	}
	return rows, distinct, sum
}

func ledger(t *testing.T, db *sql.DB) (rows, distinct int, sum int64) {
	t.Helper()
	return ledgerCounts(t, db.QueryRow(ledgerQuery))
}

// ledgerRows returns how many ledger rows message id has.
func ledgerRows(t *testing.T, db interface{ QueryRow(string, ...any) *sql.Row }, id string) int {
	t.Helper()
	var n int
	if err := db.QueryRow("SELECT COUNT(*) FROM ledger WHERE msg_id = $1", id).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// publishOrders publishes orders 0..n-1 to fb, each copies times in a row.
func publishOrders(fb *fakeBroker, n, copies int) {
	for i := range n {
		for range copies {
			fb.Publish(context.Background(), order(i))
		}
	}
}

// exactLedger fails t unless the ledger holds orders 0..n-1, each once.
func exactLedger(t *testing.T, db *sql.DB, n int, when string) {
	t.Helper()
	checkLedger(t, db.QueryRow(ledgerQuery), n, when)
}

// checkLedger fails t unless row, of ledgerQuery, counts orders 0..n-1, each once.
func checkLedger(t *testing.T, row interface{ Scan(...any) error }, n int, when string) {
	t.Helper()
	rows, distinct, sum := ledgerCounts(t, row)
	if rows != n || distinct != n || sum != int64(n*(n+1)/2) {
		t.Fatalf("%s: ledger has %d rows (%d distinct), sum %d; want %d rows, sum %d", when, rows, distinct, sum, n, n*(n+1)/2)
	}
}

func newConsumer(t *testing.T, b bundle, src idem.Source, h inbox.Handler[*sql.Tx], cfg inbox.Config) *inbox.Consumer[*sql.Tx] {
	t.Helper()
	if cfg.Consumer == "" {
		cfg.Consumer = "ledger"
	}
	if cfg.Backoff == nil {
		cfg.Backoff = func(int) time.Duration { return time.Millisecond }
	}
	c, err := inbox.New(context.Background(), src, b.txdb, b.store, h, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

var errTransient = errors.New("transient failure")

func noBackoff(int) time.Duration { return time.Millisecond }

// drain runs c until the broker holds nothing unsettled.
func drain(t *testing.T, c *inbox.Consumer[*sql.Tx], fb *fakeBroker) {
	t.Helper()
	drainAny(t, fb, c.Run)
}

// drainAny runs each of runs, all at once, until the broker holds nothing
// unsettled; each must then return context.Canceled.
func drainAny(t *testing.T, fb *fakeBroker, runs ...func(context.Context) error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	done := make(chan error, len(runs))
	runCtx, stop := context.WithCancel(ctx)
	for _, run := range runs {
		go func() { done <- run(runCtx) }()
	}
	waitErr := fb.waitSettled(ctx)
	stop()
	for range runs {
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Fatalf("Run returned %v, want context.Canceled", err)
		}
	}
	if waitErr != nil {
		t.Fatal("the broker still holds unsettled messages after 60 s")
	}
}

func TestDuplicatesAppliedOnce(t *testing.T) {
	t.Parallel()
	forEachDB(t, func(t *testing.T, b bundle) {
		for _, batch := range []int{1, 16} {
			fb := newFakeBroker()
			reg := prometheus.NewRegistry()
			c := newConsumer(t, b, fb, credit, inbox.Config{Consumer: fmt.Sprintf("ledger-%d", batch), BatchSize: batch, Registerer: reg})
			const n = 100
			publishOrders(fb, n, 3) // every message published three times
			if _, err := b.db.Exec("DELETE FROM ledger"); err != nil {
				t.Fatal(err)
			}
			drain(t, c, fb)
			exactLedger(t, b.db, n, fmt.Sprintf("batch %d", batch))
			dups := idemtest.MetricValue(t, reg, "idem_duplicates_total", map[string]string{"backend": "inbox", "scope": fmt.Sprintf("ledger-%d", batch)})
			if dups != 2*n {
				t.Errorf("batch %d: idem_duplicates_total = %v, want %d", batch, dups, 2*n)
			}
		}
	})
}

func TestLostAcksAndCrashesAtEachStep(t *testing.T) {
	t.Parallel()
	forEachDB(t, func(t *testing.T, b bundle) {
		const n = 60
		fb := newFakeBroker()
		publishOrders(fb, n, 1)
		// Each of the first deliveries dies at another point: before the handler's write,
		// after it but before COMMIT (the ctx is cancelled, the commit fails), and after
		// COMMIT before the ack (the ack is lost).
		var calls atomic.Int64
		crashy := func(ctx context.Context, tx *sql.Tx, m idem.Message) error {
			switch calls.Add(1) % 3 {
			case 0:
				return errors.New("consumer killed before the effect")
			case 1:
				if err := credit(ctx, tx, m); err != nil {
					return err
				}
				return errors.New("consumer killed after the effect, before commit")
			}
			return credit(ctx, tx, m)
		}
		fb.loseAcks = n / 2
		c := newConsumer(t, b, fb, crashy, inbox.Config{MaxAttempts: 100})
		drain(t, c, fb)
		exactLedger(t, b.db, n, "after the crashes")
	})
}

// TestKilledMidBatch cancels the consumer's context inside a handler in the middle of a
// batch: the batch rolls back, and after a restart (the broker requeues what was in
// flight) every message is applied exactly once.
func TestKilledMidBatch(t *testing.T) {
	t.Parallel()
	forEachDB(t, func(t *testing.T, b bundle) {
		const n = 50
		fb := newFakeBroker()
		publishOrders(fb, n, 1)
		ctx, kill := context.WithCancel(context.Background())
		var seen atomic.Int64
		h := func(hctx context.Context, tx *sql.Tx, m idem.Message) error {
			if seen.Add(1) == 25 {
				kill()
			}
			return credit(hctx, tx, m)
		}
		first := newConsumer(t, b, fb, h, inbox.Config{BatchSize: 10})
		first.Run(ctx)
		fb.requeueInflight()
		rows, _, _ := ledger(t, b.db)
		if rows >= 25 {
			t.Fatalf("%d rows after the kill at message 25 in a batch of 10; the third batch must have rolled back", rows)
		}
		second := newConsumer(t, b, fb, credit, inbox.Config{BatchSize: 10})
		drain(t, second, fb)
		exactLedger(t, b.db, n, "after the restart")
	})
}

func TestDeadLettersAndReplay(t *testing.T) {
	t.Parallel()
	forEachDB(t, func(t *testing.T, b bundle) {
		for _, batch := range []int{1, 8} {
			fb := newFakeBroker()
			consumer := fmt.Sprintf("dl-%d", batch)
			var flaky atomic.Bool // order-3 fails until this is set
			h := func(ctx context.Context, tx *sql.Tx, m idem.Message) error {
				if m.ID == "order-00003" && !flaky.Load() {
					return errors.New("downstream unavailable")
				}
				return credit(ctx, tx, m)
			}
			reg := prometheus.NewRegistry()
			c := newConsumer(t, b, fb, h, inbox.Config{Consumer: consumer, BatchSize: batch, MaxAttempts: 3, Registerer: reg})
			bad := idem.Message{ID: "garbled", Topic: "orders", Payload: []byte("not json")}
			noID := idem.Message{Topic: "orders", Payload: []byte(`{"Amount":1}`)}
			reused := order(1)
			reused.Payload = []byte(`{"Amount":1000}`)
			fb.Publish(context.Background(), order(1), order(2), order(3), bad, noID)
			drain(t, c, fb)
			fb.Publish(context.Background(), reused)
			drain(t, c, fb)

			dls, err := c.DeadLetters(context.Background(), 10)
			if err != nil {
				t.Fatal(err)
			}
			kinds := map[string]inbox.DeadLetter{}
			for _, dl := range dls {
				kinds[dl.Kind] = dl
			}
			if len(dls) != 4 || kinds["permanent"].Message.ID != "garbled" || kinds["no_key"].Message.ID != "" ||
				kinds["max_attempts"].Message.ID != "order-00003" || kinds["key_reused"].Message.ID != "order-00001" {
				t.Fatalf("batch %d: dead letters %+v; want garbled (permanent), no id (no_key), order-00003 (max_attempts), order-00001 (key_reused)", batch, dls)
			}
			if dl := kinds["max_attempts"]; dl.Attempts < 3 || !strings.Contains(dl.Reason, "downstream unavailable") || dl.Message.Headers["i"] != "3" {
				t.Errorf("batch %d: max_attempts dead letter %+v lacks attempts, last error or headers", batch, dl)
			}
			if got := idemtest.MetricValue(t, reg, "idem_inbox_dead_letters_total", map[string]string{"consumer": consumer, "kind": "max_attempts"}); got != 1 {
				t.Errorf("idem_inbox_dead_letters_total{kind=max_attempts} = %v, want 1", got)
			}

			flaky.Store(true) // the downstream is back: replay the dead letter, exactly once
			id := kinds["max_attempts"].ID
			if applied, err := c.Replay(context.Background(), id); err != nil || !applied {
				t.Fatalf("Replay = %v, %v; want applied", applied, err)
			}
			if _, err := c.Replay(context.Background(), id); !errors.Is(err, inbox.ErrNoDeadLetter) {
				t.Fatalf("second Replay = %v, want ErrNoDeadLetter", err)
			}
			if _, err := c.Replay(context.Background(), kinds["permanent"].ID); !inbox.IsPermanent(err) {
				t.Fatalf("Replay of a still-undecodable message = %v, want the handler's permanent error", err)
			}
			if n := ledgerRows(t, b.db, "order-00003"); n != 1 {
				t.Fatalf("order-00003 applied %d times after replay, want 1", n)
			}
			if _, err := b.db.Exec("DELETE FROM ledger"); err != nil {
				t.Fatal(err)
			}
		}
	})
}

func TestBadConfig(t *testing.T) {
	t.Parallel()
	b := sqliteBundle(t)
	for _, tc := range []struct {
		cfg   inbox.Config
		field string
	}{
		{inbox.Config{}, "Config.Consumer"},
		{inbox.Config{Consumer: "c", BatchSize: inbox.MaxBatchSize + 1}, "Config.BatchSize"},
		{inbox.Config{Consumer: "c", MaxAttempts: -1}, "Config.MaxAttempts"},
		{inbox.Config{Consumer: "c", TxRetryWindow: inbox.MaxTxRetryWindow + 1}, "Config.TxRetryWindow"},
	} {
		_, err := inbox.New(context.Background(), newFakeBroker(), b.txdb, b.store, credit, tc.cfg)
		var ie *idem.InputError
		if !errors.As(err, &ie) || ie.Field != tc.field {
			t.Errorf("New(%+v) = %v, want an InputError on %s", tc.cfg, err, tc.field)
		}
	}
}

// The handler's context carries the message's key lineage, the same on every
// delivery, so its outbound calls (idemhttp.Transport) carry the same keys.
func TestHandlerContextCarriesKeyLineage(t *testing.T) {
	t.Parallel()
	forEachDB(t, func(t *testing.T, b bundle) {
		fb := newFakeBroker()
		var mu sync.Mutex
		seen := map[string][]string{}
		h := func(ctx context.Context, tx *sql.Tx, m idem.Message) error {
			k, _ := idem.KeyFrom(ctx)
			mu.Lock()
			seen[m.ID] = append(seen[m.ID], k)
			first := len(seen[m.ID]) == 1
			mu.Unlock()
			if first {
				return errTransient // redelivered: the second run must see the same lineage
			}
			return nil
		}
		c := newConsumer(t, b, fb, h, inbox.Config{Consumer: "mailer"})
		fb.Publish(context.Background(), order(1), order(2))
		drain(t, c, fb)
		for id, ks := range seen {
			want := idemkey.Derive(id, "mailer")
			if len(ks) != 2 || ks[0] != want || ks[1] != want {
				t.Errorf("message %s: lineages %q, want %q twice", id, ks, want)
			}
		}
		if len(seen) != 2 {
			t.Fatalf("handled %d messages, want 2", len(seen))
		}
	})
}
