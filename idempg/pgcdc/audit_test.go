package pgcdc_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/audit"
	"github.com/idemhq/idem/idemnats"
	"github.com/idemhq/idem/idempg"
	"github.com/idemhq/idem/idempg/pgcdc"
	"github.com/idemhq/idem/inbox"
	"github.com/idemhq/idem/internal/testsvc"
)

// losingSink acknowledges the first publication of message lose and loses it, as
// a broker that acknowledged an unsynced write before a power cut.
type losingSink struct {
	idem.Sink
	lose string
	mu   sync.Mutex
	lost bool
}

func (s *losingSink) Publish(ctx context.Context, msgs ...idem.Message) error {
	s.mu.Lock()
	kept := msgs[:0:0]
	for _, m := range msgs {
		if m.ID == s.lose && !s.lost {
			s.lost = true
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

// The audit works on the log-based relay: a message the broker acknowledged and
// lost is found missing (the relay marked its row published), repaired (a copy
// row, which the relay reads as an insert and publishes), and the consumer applies
// it once.
func TestAuditRepairsWhatTheBrokerLost(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	// The stream again, with a dedup window far below the audit's grace (as
	// audit.Config.Grace asks): the repair's copy, under the lost message's id, is
	// stored, not dropped as a duplicate.
	const dedup = 200 * time.Millisecond
	if err := b.js.DeleteStream(ctx, b.stream); err != nil {
		t.Fatal(err)
	}
	if _, err := idemnats.EnsureStream(ctx, b.js, idemnats.StreamConfig{Name: b.stream, Subjects: []string{b.stream + ".>"},
		Storage: jetstream.MemoryStorage, Duplicates: dedup}); err != nil {
		t.Fatal(err)
	}
	nsink, err := idemnats.NewSink(b.js, idemnats.SinkConfig{})
	if err != nil {
		t.Fatal(err)
	}
	const n, lost = 30, "m-00007"
	r := b.relay(t, &losingSink{Sink: nsink, lose: lost}, pgcdc.Config{})
	b.enqueue(t, 0, n, 3)
	w := watch(t, r)

	// The consumer: an inbox keyed by message id, in the same database.
	if _, err := b.pool.Exec(ctx, "CREATE TABLE ledger (msg_id TEXT NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	txdb := idempg.TxDB(b.pool)
	store, err := idempg.New(ctx, b.pool, idempg.Config{})
	if err != nil {
		t.Fatal(err)
	}
	src, err := idemnats.NewSource(ctx, b.js, idemnats.SourceConfig{Stream: b.stream, Durable: "ledger"})
	if err != nil {
		t.Fatal(err)
	}
	c, err := inbox.New(ctx, src, txdb, store, func(ctx context.Context, tx pgx.Tx, m idem.Message) error {
		_, err := tx.Exec(ctx, "INSERT INTO ledger VALUES ($1)", m.ID)
		return err
	}, inbox.Config{Consumer: "ledger", BatchSize: 10, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := c.Run(cctx); err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("consumer: %v", err)
		}
	}()
	t.Cleanup(func() { cancel(); <-done; src.Close() })
	ledger := func() (rows, distinct int) {
		if err := b.pool.QueryRow(ctx, "SELECT COUNT(*), COUNT(DISTINCT msg_id) FROM ledger").Scan(&rows, &distinct); err != nil {
			t.Fatal(err)
		}
		return rows, distinct
	}
	waitLedger := func(want int) {
		t.Helper()
		testsvc.Eventually(t, 60*time.Second, "the consumer to apply the messages", func() bool {
			w.alive(t)
			rows, _ := ledger()
			return rows >= want
		})
		if rows, distinct := ledger(); rows != want || distinct != want {
			t.Fatalf("ledger: %d rows, %d distinct; want %d once each", rows, distinct, want)
		}
	}
	waitLedger(n - 1)
	b.waitConfirmed(t, r, w)
	if left := b.unmarked(t); len(left) > 0 {
		t.Fatalf("rows %v not marked published", left)
	}

	side, err := audit.ConsumersIn(txdb, audit.Consumer{Name: "ledger", Topics: []string{b.subject}})
	if err != nil {
		t.Fatal(err)
	}
	const grace = time.Second
	past := func() time.Time { return time.Now().Add(grace + 500*time.Millisecond) }
	auditor, err := audit.New(txdb, audit.Config{Grace: grace, Now: past}, side)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := auditor.Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	row := onlyRow(t, rep, b.subject)
	if row.Published != n || row.Applied != n-1 || row.Missing != 1 || !slices.Equal(row.MissingIDs, []string{lost}) {
		t.Fatalf("audit row %+v: want %d published, %d applied, %s missing", row, n, n-1, lost)
	}

	// Repair, once the stream forgot the ids it stored (three dedup windows: the
	// wall-clock wait the grace stands for in production).
	var last int64
	if err := b.pool.QueryRow(ctx, "SELECT MAX(published_at) FROM idem_outbox").Scan(&last); err != nil {
		t.Fatal(err)
	}
	testsvc.Eventually(t, 30*time.Second, "the stream's dedup window to pass", func() bool {
		return time.Since(time.UnixMilli(last)) > 3*dedup
	})
	rep, err = auditor.WithRepair(true).Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Repaired) != 1 || rep.Repaired[0].MsgID != lost {
		t.Fatalf("the repair republished %+v, want %s alone", rep.Repaired, lost)
	}
	waitLedger(n)
	b.waitConfirmed(t, r, w)
	if left := b.unmarked(t); len(left) > 0 {
		t.Fatalf("rows %v (the copy?) not marked published", left)
	}
	rep, err = auditor.Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if row := onlyRow(t, rep, b.subject); row.Published != n || row.Applied != n || row.Missing != 0 || row.Republished != 1 || len(rep.Repaired) != 0 {
		t.Fatalf("audit after the repair: row %+v, repaired %+v; want %d applied, 1 republished, nothing missing", row, rep.Repaired, n)
	}
}

func onlyRow(t *testing.T, rep *audit.Report, topic string) audit.Row {
	t.Helper()
	for _, r := range rep.Rows {
		if r.Topic == topic && r.Consumer == "ledger" {
			return r
		}
	}
	t.Fatalf("no audit row for %s in %+v", topic, rep.Rows)
	return audit.Row{}
}
