//go:build unix

package console_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/admin"
	"github.com/idemhq/idem/effect"
	"github.com/idemhq/idem/effect/saga"
	"github.com/idemhq/idem/idemsqlite"
	"github.com/idemhq/idem/inbox"
	"github.com/idemhq/idem/internal/testsvc"
	"github.com/idemhq/idem/outbox"
	"github.com/idemhq/idem/queue"
)

// TestBrowserRealBackends loads the console in headless Chromium against the admin
// API over a real idem on one SQLite file: keys of an idemsqlite store, a dead
// letter of a running inbox consumer, a message parked by a running relay, a failed
// saga and its effects, and a registry fed by the store, the consumer and the relay.
// It checks the tables show them, then replays the dead letter, force-evicts a held
// key, discards one parked message and retries the other through the page's
// buttons, and checks on the backends that each happened: the consumer applied the
// letter once, the key's old holder lost its lease, the relay published the retried
// message and not the discarded one.
func TestBrowserRealBackends(t *testing.T) {
	needChromium(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))

	reg := prometheus.NewRegistry()
	store, err := idemsqlite.Open(ctx, filepath.Join(t.TempDir(), "idem.db"), idemsqlite.Config{Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	db := idemsqlite.TxDB(store.DB())
	// The consumer and the relay run until the test ends, stopped before the store closes.
	runCtx, stopRunning := context.WithCancel(context.Background())
	var running sync.WaitGroup
	t.Cleanup(func() { stopRunning(); running.Wait() })
	run := func(name string, fn func(context.Context) error) {
		running.Add(1)
		go func() {
			defer running.Done()
			if err := fn(runCtx); !errors.Is(err, context.Canceled) {
				t.Errorf("%s: Run returned %v", name, err)
			}
		}()
	}

	// Keys: one completed, one held (in progress, its lease far from over).
	done, held := idem.Key{Scope: "orders", ID: "o-done"}, idem.Key{Scope: "orders", ID: "o-held"}
	res, err := store.Claim(ctx, idem.Claim{Key: done, Lease: time.Minute})
	if err != nil || res.Outcome != idem.Acquired {
		t.Fatalf("claim %v: %v %v", done, res.Outcome, err)
	}
	if err := store.Complete(ctx, done, res.Token, []byte(`{"status":"paid"}`)); err != nil {
		t.Fatal(err)
	}
	heldRes, err := store.Claim(ctx, idem.Claim{Key: held, Lease: time.Hour})
	if err != nil || heldRes.Outcome != idem.Acquired {
		t.Fatalf("claim %v: %v %v", held, heldRes.Outcome, err)
	}

	// A dead letter: a running consumer whose handler rejects pay-bad for good, until
	// the card is fixed.
	var declining atomic.Bool
	declining.Store(true)
	var mu sync.Mutex
	calls := map[string]int{}
	handled := func(id string) int { mu.Lock(); defer mu.Unlock(); return calls[id] }
	// What the handler applies is a row of payments, in the consumer's transaction.
	if _, err := store.DB().ExecContext(ctx, `CREATE TABLE payments (message_id TEXT NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	applied := func(id string) (n int) {
		t.Helper()
		if err := store.DB().QueryRowContext(ctx, `SELECT COUNT(*) FROM payments WHERE message_id = ?`, id).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	handle := func(ctx context.Context, tx *sql.Tx, m idem.Message) error {
		mu.Lock()
		calls[m.ID]++
		mu.Unlock()
		if m.ID == "pay-bad" && declining.Load() {
			return inbox.Permanent(errors.New("card declined"))
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO payments (message_id) VALUES (?)`, m.ID)
		return err
	}
	src := &chanSource{ch: make(chan []idem.Delivery, 1)}
	consumer, err := inbox.New(ctx, src, db, store, handle, inbox.Config{Consumer: "payments",
		ReplayPollInterval: 20 * time.Millisecond, Registerer: reg, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	run("consumer", consumer.Run)
	// One message a batch, so each handler runs once a delivery (a failure in a batch
	// runs the batch again under savepoints).
	src.ch <- []idem.Delivery{{Message: idem.Message{ID: "pay-ok", Topic: "payments.v1", Payload: []byte(`{"amount":5}`)},
		Attempt: 1, Position: "p0", Settler: nopSettler{}}}
	src.ch <- []idem.Delivery{{Message: idem.Message{ID: "pay-bad", Topic: "payments.v1", Payload: []byte(`{"amount":7}`)},
		Attempt: 1, Position: "p1", Settler: nopSettler{}}}
	dla := inbox.NewDeadLetterAdmin(db)
	var letter inbox.DeadLetter
	testsvc.Eventually(t, time.Minute, "pay-bad dead-lettered", func() bool {
		list, err := dla.List(ctx, inbox.DeadLetterFilter{Consumer: "payments"})
		if err != nil {
			t.Fatal(err)
		}
		if len(list) == 1 {
			letter = list[0]
		}
		return len(list) == 1
	})
	if letter.Message.ID != "pay-bad" || handled("pay-bad") != 1 || applied("pay-bad") != 0 || applied("pay-ok") != 1 {
		t.Fatalf("dead letter %+v; pay-bad handled %d times, applied %d; pay-ok applied %d",
			letter, handled("pay-bad"), applied("pay-bad"), applied("pay-ok"))
	}
	declining.Store(false) // the card is fixed: a replay can apply

	// A message waiting in the database as the queue, with metrics.
	qu, err := queue.New(ctx, db, queue.Config{Registerer: reg, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.InTx(ctx, func(tx *sql.Tx) error {
		_, err := qu.EnqueueTx(ctx, tx, idem.Message{ID: "job-1", Topic: "reports"})
		return err
	}); err != nil {
		t.Fatal(err)
	}

	// A parked message: a running relay whose broker is down.
	ob, err := outbox.New(ctx, db, outbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	sink := &switchSink{failing: true}
	relay, err := ob.Relay(sink, outbox.RelayConfig{MaxAttempts: 1, Instance: "relay-a", PollInterval: 50 * time.Millisecond,
		Registerer: reg, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	run("relay", relay.Run)
	if err := db.InTx(ctx, func(tx *sql.Tx) error {
		_, err := ob.EnqueueTx(ctx, tx, idem.Message{ID: "ship-1", Topic: "shipments", Payload: []byte(`{"order":"o-done"}`)},
			idem.Message{ID: "ship-2", Topic: "shipments", Payload: []byte(`{"order":"o-gone"}`)})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	oba := outbox.NewAdmin(db)
	var parked, parked2 outbox.Parked
	testsvc.Eventually(t, time.Minute, "ship-1 and ship-2 parked", func() bool {
		list, err := oba.Parked(ctx, 0, 10)
		if err != nil {
			t.Fatal(err)
		}
		if len(list) == 2 {
			parked, parked2 = list[0], list[1]
		}
		return len(list) == 2
	})
	if parked.Message.ID != "ship-1" || parked2.Message.ID != "ship-2" {
		t.Fatalf("parked %+v and %+v", parked, parked2)
	}
	sink.setFailing(false) // the broker is back; a parked message waits for a retry

	// A failed saga: its last step fails for good, and so does the refund of the first.
	def := saga.Definition{Name: "checkout", Steps: []saga.Step{
		{Name: "charge",
			Action: func(ctx context.Context, in saga.Input) ([]byte, error) { return []byte("ok"), nil },
			Compensate: func(ctx context.Context, in saga.Input) error {
				return effect.Permanent(errors.New("refund API rejects the card"))
			}},
		{Name: "ship", NoCompensation: true, Action: func(ctx context.Context, in saga.Input) ([]byte, error) {
			return nil, effect.Permanent(errors.New("out of stock"))
		}},
	}}
	orch, err := saga.New(ctx, db, saga.Config{Backoff: func(int) time.Duration { return 0 }}, def)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := orch.Start(ctx, "checkout", "c-1", nil); err != nil {
		t.Fatal(err)
	}
	sa, err := saga.NewAdmin(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	testsvc.Eventually(t, time.Minute, "saga c-1 failed", func() bool {
		if _, err := orch.RunOnce(ctx); err != nil {
			t.Fatal(err)
		}
		d, err := sa.Get(ctx, "c-1")
		return err == nil && d.State == saga.Failed
	})

	// The admin API over all of it.
	ui, logs := openSQLConsole(ctx, t, db, admin.Config{Stores: map[string]idem.Inspector{"main": store}, Gatherer: reg})

	// The tables show the real rows.
	dlRow := fmt.Sprintf(`#deadletters tr[data-id="%d"]`, letter.ID)
	pRow := fmt.Sprintf(`#parked tr[data-id="%d"]`, parked.ID)
	pRow2 := fmt.Sprintf(`#parked tr[data-id="%d"]`, parked2.ID)
	ui.wantTrue("one dead letter", `document.querySelectorAll('#deadletters tr[data-id]').length === 1`)
	ui.wantText(dlRow+` td:nth-child(2)`, "payments")
	ui.wantText(dlRow+` td:nth-child(3)`, "payments.v1")
	ui.wantText(dlRow+` td:nth-child(4)`, "permanent")
	ui.wantTrue("the dead letter's reason", `document.querySelector('`+dlRow+` td:nth-child(5)').textContent.includes('card declined')`)
	ui.wantText(dlRow+` td:nth-child(8) code`, `{"amount":7}`)
	ui.wantTrue("two parked messages", `document.querySelectorAll('#parked tr[data-id]').length === 2`)
	ui.wantText(pRow2+` td:nth-child(3)`, "ship-2")
	ui.wantText(pRow+` td:nth-child(2)`, "shipments")
	ui.wantText(pRow+` td:nth-child(3)`, "ship-1")
	ui.wantTrue("the parked message's error", `document.querySelector('`+pRow+` td:nth-child(5)').textContent.includes('broker down')`)
	ui.wantTrue("relay-a in the outbox status", `document.getElementById('outbox-status').textContent.includes('relay relay-a')`)
	ui.wantText(`#queue-topics tr[data-id="reports"] td:nth-child(2)`, "1")
	ui.wantTrue("the queued message", `[...document.querySelectorAll('#queue-messages tr[data-id] td:nth-child(3)')].map(td => td.textContent).join() === 'job-1'`)
	ui.wantText(`#sagas tr[data-id="c-1"] td:nth-child(2)`, "checkout")
	ui.wantText(`#sagas tr[data-id="c-1"] td:nth-child(3)`, "failed")
	ui.wantTrue("the saga's failed effects, with their steps", `Array.from(document.querySelectorAll('#effects tr[data-id="c-1"]'),
		tr => tr.cells[0].textContent + ':' + tr.cells[1].textContent).sort().join() === 'c-1 do:ship:failed,c-1 undo:charge:failed'`)

	ui.run(`document.getElementById('keys-scope').value = 'orders'; document.getElementById('keys-form').requestSubmit()`)
	ui.waitTrue("the keys", `document.querySelectorAll('#keys tr[data-id]').length === 2`)
	ui.wantText(`#keys tr[data-id="o-done"] td:nth-child(2)`, "completed")
	ui.wantText(`#keys tr[data-id="o-done"] td:nth-child(6) code`, `{"status":"paid"}`)
	ui.wantText(`#keys tr[data-id="o-held"] td:nth-child(2)`, "in progress")
	ui.wantText(`#keys tr[data-id="o-held"] td:nth-child(3)`, fmt.Sprint(heldRes.Token))

	// The charts read the store's, the consumer's and the relay's metrics.
	ui.waitTrue("the charts", `idemConsole.polls >= 2 && ['claims', 'deadletters', 'backlog', 'parked'].every(id =>
		!document.querySelector('[data-chart="' + id + '"]').classList.contains('absent')) &&
		document.querySelector('[data-chart="parked"] .chart-value').textContent === '2'`)
	ui.screenshot("real-overview")

	// Replay the dead letter: the API records the request, the running consumer applies it.
	ui.run(`document.querySelector('` + dlRow + ` button[data-action="replay"]').click()`)
	ui.waitTrue("the dialog", `document.getElementById('confirm').open`)
	ui.run(`document.getElementById('confirm-reason').value = 'card fixed'; document.getElementById('confirm-form').requestSubmit()`)
	ui.waitTrue("the replay's outcome", `idemConsole.actions.some(a => a.ok && a.text === 'replay dead letter `+fmt.Sprint(letter.ID)+`: requested')`)
	testsvc.Eventually(t, time.Minute, "the consumer applied the replay", func() bool {
		dl, err := dla.Get(ctx, letter.ID)
		if err != nil {
			t.Fatal(err)
		}
		return dl.State == inbox.StateReplayed
	})
	wantAudit(t, logs, "POST /api/deadletters/replay", "card fixed")
	ui.run(`document.getElementById('refresh').click()`)
	ui.waitTrue("the dead letter gone", `!document.querySelector('`+dlRow+`') && document.querySelector('#deadletters tbody td').textContent === 'No dead letters.'`)

	// Evicting the held key: refused without force (its lease runs), done with it.
	ui.run(`document.querySelector('#keys tr[data-id="o-held"] button[data-action="evict"]').click()`)
	ui.waitTrue("the dialog", `document.getElementById('confirm').open && !document.getElementById('confirm-force-row').hidden`)
	ui.run(`document.getElementById('confirm-reason').value = 'try'; document.getElementById('confirm-form').requestSubmit()`)
	ui.waitTrue("the refusal", `idemConsole.actions.some(a => !a.ok && a.text.startsWith('evict key orders/o-held:') && a.text.includes('set force'))`)
	if _, err := store.Inspect(ctx, held); err != nil {
		t.Fatalf("o-held after the refused eviction: %v", err)
	}
	ui.run(`document.querySelector('#keys tr[data-id="o-held"] button[data-action="evict"]').click()`)
	ui.waitTrue("the dialog", `document.getElementById('confirm').open`)
	ui.run(`document.getElementById('confirm-reason').value = 'holder died';
		document.getElementById('confirm-force').checked = true;
		document.getElementById('confirm-form').requestSubmit()`)
	ui.waitTrue("the eviction", `idemConsole.actions.some(a => a.ok && a.text === 'evict key orders/o-held: evicted')`)
	ui.waitTrue("o-held gone", `!document.querySelector('#keys tr[data-id="o-held"]') && document.querySelectorAll('#keys tr[data-id]').length === 1`)
	if _, err := store.Inspect(ctx, held); !errors.Is(err, idem.ErrNotFound) {
		t.Errorf("Inspect o-held after the eviction: %v, want idem.ErrNotFound", err)
	}
	if err := store.Complete(ctx, held, heldRes.Token, []byte("late")); !errors.Is(err, idem.ErrLeaseLost) {
		t.Errorf("the old holder's Complete: %v, want idem.ErrLeaseLost", err)
	}
	if _, err := store.Inspect(ctx, done); err != nil {
		t.Errorf("o-done after evicting o-held: %v", err)
	}
	wantAudit(t, logs, "POST /api/keys/evict", "holder died")

	// Discard ship-2: it leaves the table (the API still lists it, discarded) and the
	// status counts it.
	ui.run(`document.querySelector('` + pRow2 + ` button[data-action="discard"]').click()`)
	ui.waitTrue("the dialog", `document.getElementById('confirm').open`)
	ui.run(`document.getElementById('confirm-reason').value = 'order cancelled'; document.getElementById('confirm-form').requestSubmit()`)
	ui.waitTrue("the discard's outcome", `idemConsole.actions.some(a => a.ok && a.text === 'discard parked message `+fmt.Sprint(parked2.ID)+`: discarded')`)
	ui.waitTrue("ship-2 gone, counted as discarded", `!document.querySelector('`+pRow2+`') && !!document.querySelector('`+pRow+`') &&
		document.getElementById('outbox-status').textContent.includes('1 discarded')`)
	if st, err := oba.Status(ctx); err != nil || st.Parked != 1 || st.Discarded != 1 {
		t.Errorf("outbox after the discard: %+v %v, want 1 parked and 1 discarded", st, err)
	}

	// Retry ship-1: the running relay publishes it to the working broker.
	ui.run(`document.querySelector('` + pRow + ` button[data-action="retry"]').click()`)
	ui.waitTrue("the dialog", `document.getElementById('confirm').open`)
	ui.run(`document.getElementById('confirm-reason').value = 'broker back'; document.getElementById('confirm-form').requestSubmit()`)
	ui.waitTrue("the retry's outcome", `idemConsole.actions.some(a => a.ok && a.text === 'retry parked message `+fmt.Sprint(parked.ID)+`: retried')`)
	testsvc.Eventually(t, time.Minute, "ship-1 published", func() bool { return len(sink.sent()) > 0 })
	ui.run(`document.getElementById('refresh').click()`)
	ui.waitTrue("the parked message gone", `!document.querySelector('`+pRow+`') && document.querySelector('#parked tbody td').textContent === 'No parked messages.'`)
	ui.waitTrue("the parked gauge at 0", `document.querySelector('[data-chart="parked"] .chart-value').textContent === '0'`)
	wantAudit(t, logs, "POST /api/outbox/parked/{id}/retry", "broker back")
	ui.wantTrue("no policy violation", `idemConsole.violations.length === 0`)
	ui.screenshot("real-after-actions")

	// Exactly once, still: the replay ran the handler once more, the relay published once.
	if n := handled("pay-bad"); n != 2 {
		t.Errorf("pay-bad handled %d times, want 2 (the failure and the replay)", n)
	}
	if a, b := applied("pay-bad"), applied("pay-ok"); a != 1 || b != 1 {
		t.Errorf("applied pay-bad %d times and pay-ok %d times, want once each", a, b)
	}
	if got := sink.sent(); !slices.Equal(got, []string{"ship-1"}) {
		t.Errorf("published %v, want [ship-1]", got)
	}
	dl, err := dla.Get(ctx, letter.ID)
	if err != nil || dl.ReplayNote != "applied" || dl.ReplayReason != "card fixed" {
		t.Errorf("the replayed letter: %+v %v", dl, err)
	}
}

// chanSource delivers the batches sent on ch, and waits for ctx otherwise.
type chanSource struct{ ch chan []idem.Delivery }

func (s *chanSource) Receive(ctx context.Context, max int) ([]idem.Delivery, error) {
	select {
	case ds := <-s.ch:
		return ds, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}
func (s *chanSource) Close() error { return nil }

type nopSettler struct{}

func (nopSettler) Ack(context.Context) error                { return nil }
func (nopSettler) Nak(context.Context, time.Duration) error { return nil }

// switchSink fails every publication while failing is set, and records the others.
type switchSink struct {
	mu        sync.Mutex
	failing   bool
	published []string
}

func (s *switchSink) Publish(ctx context.Context, msgs ...idem.Message) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failing {
		return errors.New("broker down")
	}
	for _, m := range msgs {
		s.published = append(s.published, m.ID)
	}
	return nil
}

func (s *switchSink) setFailing(f bool) { s.mu.Lock(); s.failing = f; s.mu.Unlock() }

func (s *switchSink) sent() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.published)
}
