package pgcdc_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemnats"
	"github.com/idemhq/idem/idempg"
	"github.com/idemhq/idem/idempg/pgcdc"
	"github.com/idemhq/idem/inbox"
	"github.com/idemhq/idem/internal/pgcluster"
	"github.com/idemhq/idem/internal/testsvc"
)

// caughtUp waits until r's slot confirmed the transactions of got, the messages
// read from the stream: nothing of them is published again after it.
func caughtUp(t *testing.T, r *pgcdc.Relay, got []idem.Message) {
	t.Helper()
	var last uint64
	for _, m := range got {
		last = max(last, positionOf(t, m).lsn)
	}
	testsvc.Eventually(t, 60*time.Second, "the slot confirmed past the last commit", func() bool {
		st, err := r.Status(context.Background())
		return err == nil && st.Confirmed > last
	})
}

// dropSlot drops the slot behind the relays' back: an operator, or a failover to
// a standby that has no slot (PostgreSQL 15).
func (b *bundle) dropSlot(t *testing.T) {
	t.Helper()
	// The stopped relay's server process may read it for a moment yet.
	testsvc.Eventually(t, 30*time.Second, "the slot dropped", func() bool {
		_, err := b.pool.Exec(context.Background(), "SELECT pg_drop_replication_slot($1)", b.slot)
		return err == nil
	})
}

// lsnApplied is what applyWithLSN's consumer left: the ledger's rows and distinct
// IDs, the handler's runs, the watermark rows and key records, and the tracker,
// to read its watermarks.
type lsnApplied struct {
	rows, distinct, handled, watermarks, keyRecords int
	tracker                                         *inbox.LSNTracker[pgx.Tx]
}

// applyWithLSN runs an inbox deduplicating by position (inbox.WithLSN) over the
// whole stream, in order, until it settled all streamLen messages.
func (b *bundle) applyWithLSN(t *testing.T, streamLen int) lsnApplied {
	t.Helper()
	ctx := context.Background()
	if _, err := b.pool.Exec(ctx, "CREATE TABLE ledger (msg_id TEXT, payload TEXT)"); err != nil {
		t.Fatal(err)
	}
	txdb := idempg.TxDB(b.pool)
	tracker, err := inbox.NewLSNTracker(ctx, txdb, inbox.LSNConfig{Scope: "ledger"})
	if err != nil {
		t.Fatal(err)
	}
	store, err := idempg.New(ctx, b.pool, idempg.Config{})
	if err != nil {
		t.Fatal(err)
	}
	src, err := idemnats.NewSource(ctx, b.js, idemnats.SourceConfig{Stream: b.stream, Durable: "ledger", MaxAckPending: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	var handled atomic.Int32
	c, err := inbox.New(ctx, src, txdb, store, func(ctx context.Context, tx pgx.Tx, m idem.Message) error {
		handled.Add(1)
		_, err := tx.Exec(ctx, "INSERT INTO ledger VALUES ($1, $2)", m.Headers["x-id"], string(m.Payload))
		return err
	}, inbox.Config{Consumer: "ledger", BatchSize: 1}, inbox.WithLSN(tracker))
	if err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); c.Run(cctx) }()
	cons, err := b.js.Consumer(ctx, b.stream, "ledger")
	if err != nil {
		t.Fatal(err)
	}
	testsvc.Eventually(t, 60*time.Second, "the consumer settling the whole stream", func() bool {
		info, err := cons.Info(ctx)
		return err == nil && info.NumPending == 0 && info.NumAckPending == 0 && info.AckFloor.Stream == uint64(streamLen)
	})
	cancel()
	<-done
	got := lsnApplied{handled: int(handled.Load()), tracker: tracker}
	b.pool.QueryRow(ctx, "SELECT COUNT(*), COUNT(DISTINCT msg_id) FROM ledger").Scan(&got.rows, &got.distinct)
	b.pool.QueryRow(ctx, "SELECT COUNT(*) FROM idem_sequences").Scan(&got.watermarks)
	b.pool.QueryRow(ctx, "SELECT COUNT(*) FROM idem_records").Scan(&got.keyRecords)
	return got
}

// A slot dropped while no relay runs, with outbox rows committed meanwhile: the
// next relay says so (an ERROR log, the metric, Health), re-creates the slot and
// publishes every row of the gap once, then streams; nothing published before
// is sent again, and an inbox deduplicating by position applies all of them. A
// first start is no loss, nor is a restart after the recovery.
func TestSlotLostWhileStoppedIsRecovered(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	b.revokeEmit(t)
	cfg := pgcdc.Config{BatchSize: 8, Messages: true}
	first := b.relay(t, b.sink, cfg) // a first start: creates the slot, no loss
	w := watch(t, first)
	b.enqueue(t, 0, 30, 5)
	b.publishedIDs(t, w, 30)
	caughtUp(t, first, b.published(t, 30))
	if l := first.Health().SlotLoss; l != nil {
		t.Fatalf("a first start reported a slot loss: %+v", l)
	}
	w.stop()

	b.dropSlot(t)
	b.enqueue(t, 30, 40, 4) // the gap: committed while no slot exists
	if err := pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		_, err := pgcdc.EmitTx(ctx, idempg.Querier(tx), idem.Message{ID: "emitted-in-gap", Topic: b.subject})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	b.rawRow(t, "bad-in-gap", b.subject, "[not an object]") // parked by the recovery

	var logs testsvc.Buffer
	reg := prometheus.NewRegistry()
	c2 := cfg
	c2.Registerer, c2.Logger = reg, slog.New(slog.NewTextHandler(&logs, nil))
	second := b.relay(t, b.sink, c2) // Setup sees the loss and leaves the slot to Run
	if st, err := second.Status(ctx); err != nil || st.Exists {
		t.Fatalf("Setup re-created the lost slot (%+v, %v): the gap would go unnoticed", st, err)
	}
	w2 := watch(t, second)
	testsvc.Eventually(t, 60*time.Second, "the recovery finished", func() bool {
		w2.alive(t)
		l := second.Health().SlotLoss
		return l != nil && !l.Finished.IsZero()
	})
	b.enqueue(t, 70, 20, 5) // streamed from the new slot
	b.publishedIDs(t, w2, 90)
	caughtUp(t, second, b.published(t, 90))
	all := b.published(t, 90)
	w2.stop()

	if len(all) != 90 {
		t.Fatalf("%d messages in the stream, want 90: each row once", len(all))
	}
	base := all[0].Headers[pgcdc.HeaderSource]
	last := map[string]position{}
	for i, m := range all {
		if want := fmt.Sprintf("m-%05d", i); m.ID != want {
			t.Fatalf("message %d is %s, want %s (every row once, the gap in id order between the two slots)", i, m.ID, want)
		}
		src := m.Headers[pgcdc.HeaderSource]
		if want := base + "@2"; i < 30 && src != base || i >= 30 && src != want {
			t.Fatalf("message %d (%s) has source %q; want %q before the loss and %q after", i, m.ID, src, base, want)
		}
		p := positionOf(t, m)
		if q, ok := last[src]; ok && !q.less(p) {
			t.Fatalf("message %d (%s) at %v is not after %v of its source", i, m.ID, p, q)
		}
		last[src] = p
	}
	l := second.Health().SlotLoss
	if !strings.Contains(l.Reason, "missing") || l.Recovered != 40 || l.To == 0 || l.From > l.To || l.Source != base+"@2" {
		t.Fatalf("Health().SlotLoss = %+v; want missing, 40 recovered, From <= To", l)
	}
	for name, want := range map[string]float64{"idem_cdc_slot_lost_total": 1, "idem_cdc_slot_recovered_total": 40, "idem_cdc_parked_total": 1} {
		if got := gauge(t, reg, name); got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	if out := logs.String(); !strings.Contains(out, "level=ERROR") || !strings.Contains(out, "rows_recovered=40") || !strings.Contains(out, "EmitTx") {
		t.Fatalf("no ERROR log naming the gap:\n%s", out)
	}
	t.Logf("slot loss: %d rows recovered in %v (gap %s..%s), 0 of the 30 published before sent again", l.Recovered, l.Finished.Sub(l.Detected),
		pgcdc.FormatLSN(l.From), pgcdc.FormatLSN(l.To))
	for _, id := range b.unmarked(t) {
		if id < "m-00070" { // the gap's rows are marked before the recovery ends
			t.Fatalf("rows of the gap left unmarked: %v", b.unmarked(t))
		}
	}
	testsvc.Eventually(t, 30*time.Second, "every published row marked", func() bool { return len(b.unmarked(t)) == 0 })

	// A restart after the recovery is no loss: it streams on, under the new source.
	third := b.relay(t, b.sink, cfg)
	w3 := watch(t, third)
	b.enqueue(t, 90, 5, 5)
	caughtUp(t, third, b.published(t, 95))
	got := b.published(t, 95)
	w3.stop()
	if l := third.Health().SlotLoss; l != nil || len(got) != 95 || got[94].Headers[pgcdc.HeaderSource] != base+"@2" {
		t.Fatalf("restart: SlotLoss %+v, %d messages, last source %q", l, len(got), got[len(got)-1].Headers[pgcdc.HeaderSource])
	}

	applied := b.applyWithLSN(t, 95)
	if applied.rows != 95 || applied.distinct != 95 || applied.watermarks != 2 {
		t.Fatalf("the position-deduplicating consumer applied %d rows (%d distinct) with %d watermarks; want 95, 95, 2", applied.rows, applied.distinct, applied.watermarks)
	}
	t.Logf("WithLSN consumer: %d applied, %d distinct, %d doubled", applied.rows, applied.distinct, applied.rows-applied.distinct)
}

// A relay killed during the recovery, after the broker stored a batch of the gap
// and before it was marked: the next one recovers again what is not marked, and
// the batch goes out again at the same positions, which the position-deduplicating
// consumer drops.
func TestSlotLossRecoveryKilledMidway(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	cfg := pgcdc.Config{BatchSize: 8}
	first := b.relay(t, b.sink, cfg)
	w := watch(t, first)
	b.enqueue(t, 0, 10, 5)
	caughtUp(t, first, b.published(t, 10))
	w.stop()
	b.dropSlot(t)
	b.enqueue(t, 10, 40, 4)

	counted := &flakySink{Sink: b.sink}
	second := b.relay(t, counted, cfg)
	kctx, kill := context.WithTimeout(ctx, 60*time.Second) // bounded: a relay that recovers nothing publishes nothing
	defer kill()
	var batches atomic.Int32
	second.SetAfterPublish(func() {
		if batches.Add(1) == 2 {
			kill() // the second batch of the gap is stored; the relay dies before marking it
		}
	})
	if err := second.Run(kctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Run = %v, want context.Canceled: killed after the second batch of the gap", err)
	}
	if l := second.Health().SlotLoss; l == nil || !l.Finished.IsZero() || l.Recovered != 8 {
		t.Fatalf("SlotLoss after the kill = %+v; want a recovery under way with one batch marked", l)
	}

	third := b.relay(t, b.sink, cfg)
	w3 := watch(t, third)
	testsvc.Eventually(t, 60*time.Second, "the recovery finished", func() bool {
		w3.alive(t)
		l := third.Health().SlotLoss
		return l != nil && !l.Finished.IsZero()
	})
	caughtUp(t, third, b.published(t, 58))
	all := b.published(t, 58)
	w3.stop()
	seen := map[string]position{}
	copies := 0
	for _, m := range all {
		p := positionOf(t, m)
		if q, dup := seen[m.ID]; dup {
			if q != p {
				t.Fatalf("%s recovered again at %v, first at %v: a copy must keep its position", m.ID, p, q)
			}
			copies++
		}
		seen[m.ID] = p
	}
	if len(seen) != 50 || copies != 8 {
		t.Fatalf("%d distinct messages and %d copies; want 50 and the 8 of the batch stored and not marked", len(seen), copies)
	}
	if l := third.Health().SlotLoss; l.Source != all[len(all)-1].Headers[pgcdc.HeaderSource] || !strings.HasSuffix(l.Source, "@2") {
		t.Fatalf("the resumed recovery changed the epoch: %+v", l)
	}
	if applied := b.applyWithLSN(t, len(all)); applied.rows != 50 || applied.distinct != 50 {
		t.Fatalf("the position-deduplicating consumer applied %d rows (%d distinct); want 50", applied.rows, applied.distinct)
	}
}

// With RefuseSlotLoss the relay stops on a lost slot with a *SetupError naming the
// fix, and creates nothing; DropSlot retires a slot, and the next start is no loss.
func TestSlotLossRefusedAndRetired(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	first := b.relay(t, b.sink, pgcdc.Config{})
	b.dropSlot(t)
	b.enqueue(t, 0, 3, 3)
	refusing, err := pgcdc.New(b.url, b.sink, b.cfg(pgcdc.Config{RefuseSlotLoss: true}))
	if err != nil {
		t.Fatal(err)
	}
	var se *pgcdc.SetupError
	if err := refusing.Setup(ctx); !errors.As(err, &se) || se.Check != "slot" || !strings.Contains(se.Error(), "lost") {
		t.Fatalf("Setup = %v, want a *SetupError of the lost slot", err)
	}
	if err := refusing.Run(ctx); !errors.As(err, &se) || !strings.Contains(se.Fix, "RefuseSlotLoss") {
		t.Fatalf("Run = %v, want a *SetupError naming the fix", err)
	}
	if st, _ := refusing.Status(ctx); st.Exists {
		t.Fatal("a refusing relay created the slot")
	}
	skipping, _ := pgcdc.New(b.url, b.sink, b.cfg(pgcdc.Config{SkipMarkPublished: true}))
	if err := skipping.Setup(ctx); !errors.As(err, &se) || !strings.Contains(se.Error(), "SkipMarkPublished") {
		t.Fatalf("Setup with SkipMarkPublished = %v, want a *SetupError: it cannot tell what it published", err)
	}

	// Retired: a new slot, a new source epoch, no loss; what committed meanwhile is
	// not published (DropSlot's contract).
	if err := first.DropSlot(ctx); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	again := b.relay(t, b.sink, pgcdc.Config{Registerer: reg})
	w := watch(t, again)
	b.enqueue(t, 3, 2, 2)
	got := b.publishedIDs(t, w, 2)
	w.stop()
	if len(got) != 2 || got[0] != "m-00003" || again.Health().SlotLoss != nil || gauge(t, reg, "idem_cdc_slot_lost_total") != 0 {
		t.Fatalf("after DropSlot: published %v, SlotLoss %+v", got, again.Health().SlotLoss)
	}
	if m := b.published(t, 2)[0]; !strings.HasSuffix(m.Headers[pgcdc.HeaderSource], "@2") {
		t.Fatalf("source after a retired slot is %q, want a new epoch", m.Headers[pgcdc.HeaderSource])
	}
}

// A slot the server invalidated (max_slot_wal_keep_size, wal_status lost) is a
// loss like a missing one: recovered, every row once. It needs a cluster of its
// own, as the setting would invalidate the other tests' slots.
func TestSlotInvalidatedIsRecovered(t *testing.T) {
	t.Parallel()
	testsvc.PostgresServerBinaries(t)
	ctx := context.Background()
	c, err := pgcluster.Start(ctx, pgcluster.Options{Settings: []string{"max_slot_wal_keep_size = 1MB"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Stop(context.Background()) })
	b := setupOn(t, c.URL)
	first := b.relay(t, b.sink, pgcdc.Config{})
	w := watch(t, first)
	b.enqueue(t, 0, 5, 5)
	caughtUp(t, first, b.published(t, 5))
	w.stop()
	b.enqueue(t, 5, 20, 4) // the gap
	if _, err := b.pool.Exec(ctx, "CREATE TABLE filler (x TEXT)"); err != nil {
		t.Fatal(err)
	}
	var status string
	for i := 0; status != "lost"; i++ {
		if i == 30 {
			t.Fatalf("the slot is %q after %d WAL segments", status, i)
		}
		if _, err := b.pool.Exec(ctx, "INSERT INTO filler VALUES (repeat('x', 1000)); SELECT pg_switch_wal(); CHECKPOINT"); err != nil {
			t.Fatal(err)
		}
		if err := b.pool.QueryRow(ctx, "SELECT wal_status FROM pg_replication_slots WHERE slot_name = $1", b.slot).Scan(&status); err != nil {
			t.Fatal(err)
		}
	}
	second := b.relay(t, b.sink, pgcdc.Config{})
	w2 := watch(t, second)
	caughtUp(t, second, b.published(t, 25))
	all := b.published(t, 25)
	w2.stop()
	if l := second.Health().SlotLoss; l == nil || !strings.Contains(l.Reason, "invalidated") || l.Recovered != 20 {
		t.Fatalf("SlotLoss = %+v, want invalidated, 20 recovered", l)
	}
	for i, m := range all {
		if want := fmt.Sprintf("m-%05d", i); m.ID != want || len(all) != 25 {
			t.Fatalf("message %d of %d is %s, want %s", i, len(all), m.ID, want)
		}
	}
}
