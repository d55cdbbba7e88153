package inbox_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemmysql"
	"github.com/idemhq/idem/idemtest"
	"github.com/idemhq/idem/inbox"
	"github.com/idemhq/idem/internal/sqltest"
)

// forEachDialect runs fn on SQLite, PostgreSQL and MySQL/MariaDB bundles.
func forEachDialect(t *testing.T, fn func(t *testing.T, b bundle)) {
	forEachDB(t, fn)
	t.Run("mysql", func(t *testing.T) {
		t.Parallel()
		db := sqltest.MySQLDollarDB(t)
		s, err := idemmysql.New(context.Background(), db, idemmysql.Config{})
		if err != nil {
			t.Fatal(err)
		}
		fn(t, finishBundle(t, db, s))
	})
}

// handlerCalls counts a handler's calls per message id.
type handlerCalls struct {
	mu sync.Mutex
	n  map[string]int
}

func (h *handlerCalls) add(id string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.n == nil {
		h.n = map[string]int{}
	}
	h.n[id]++
}

func (h *handlerCalls) get(id string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.n[id]
}

// gate is a handler that credits a message unless fail returns an error for it.
func gate(calls *handlerCalls, fail func(m idem.Message) error) inbox.Handler[*sql.Tx] {
	return func(ctx context.Context, tx *sql.Tx, m idem.Message) error {
		calls.add(m.ID)
		if err := fail(m); err != nil {
			return err
		}
		return credit(ctx, tx, m)
	}
}

// deadLetter dead-letters msgs for consumer (its handler fails each permanently with
// the message's "why" header as reason) and returns their dead letters' ids by
// message id.
func deadLetter(t *testing.T, b bundle, consumer string, msgs ...idem.Message) map[string]int64 {
	t.Helper()
	fb := newFakeBroker()
	c := newConsumer(t, b, fb, func(ctx context.Context, tx *sql.Tx, m idem.Message) error {
		return inbox.Permanent(errors.New(m.Headers["why"]))
	}, inbox.Config{Consumer: consumer, ReplayPollInterval: -1})
	fb.Publish(context.Background(), msgs...)
	drain(t, c, fb)
	dls, err := c.DeadLetters(context.Background(), 1000)
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]int64{}
	for _, dl := range dls {
		ids[dl.Message.ID] = dl.ID
	}
	if len(ids) != len(msgs) {
		t.Fatalf("consumer %s has %d dead letters, want %d", consumer, len(ids), len(msgs))
	}
	return ids
}

func why(i int, reason string) idem.Message {
	m := order(i)
	m.Headers["why"] = reason
	return m
}

// runConsumer runs c in the background until the test ends.
func runConsumer(t *testing.T, c *inbox.Consumer[*sql.Tx]) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; !errors.Is(err, context.Canceled) {
				t.Errorf("Run returned %v, want context.Canceled", err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// waitFor polls cond until it holds, failing t after a minute.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("still waiting after a minute for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func get(t *testing.T, a *inbox.DeadLetterAdmin[*sql.Tx], id int64) inbox.DeadLetter {
	t.Helper()
	dl, err := a.Get(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return dl
}

func TestDeadLetterAdminListFilters(t *testing.T) {
	t.Parallel()
	forEachDialect(t, func(t *testing.T, b bundle) {
		ctx := context.Background()
		a := inbox.NewDeadLetterAdmin(b.txdb)
		before := time.Now().Add(-time.Second)
		idsA := deadLetter(t, b, "a", why(1, "price 50%_off is invalid"), why(2, "PRICE 50ab off is invalid"),
			why(3, "unknown sku"), why(4, "unknown sku"), why(5, "unknown sku"))
		deadLetter(t, b, "b", why(6, "unknown sku"), why(7, "late"), why(8, "late"))
		list := func(f inbox.DeadLetterFilter) []inbox.DeadLetter {
			t.Helper()
			dls, err := a.List(ctx, f)
			if err != nil {
				t.Fatalf("List(%+v): %v", f, err)
			}
			return dls
		}
		for _, tc := range []struct {
			name string
			f    inbox.DeadLetterFilter
			want int
		}{
			{"all", inbox.DeadLetterFilter{}, 8},
			{"consumer a", inbox.DeadLetterFilter{Consumer: "a"}, 5},
			{"consumer b", inbox.DeadLetterFilter{Consumer: "b"}, 3},
			{"kind permanent", inbox.DeadLetterFilter{Kind: "permanent"}, 8},
			{"kind no_key", inbox.DeadLetterFilter{Kind: "no_key"}, 0},
			{"LIKE metacharacters are literal", inbox.DeadLetterFilter{ReasonContains: "50%_"}, 1},
			{"case-insensitive", inbox.DeadLetterFilter{ReasonContains: "price 50"}, 2},
			{"reason and consumer", inbox.DeadLetterFilter{Consumer: "b", ReasonContains: "sku"}, 1},
			{"since", inbox.DeadLetterFilter{Since: before}, 8},
			{"until", inbox.DeadLetterFilter{Until: before}, 0},
			{"after the first id", inbox.DeadLetterFilter{Consumer: "a", AfterID: idsA["order-00001"]}, 4},
		} {
			if got := list(tc.f); len(got) != tc.want {
				t.Errorf("%s: List returned %d dead letters, want %d: %+v", tc.name, len(got), tc.want, got)
			}
		}

		// Pages of 2 visit each letter once, in id order.
		seen := map[int64]bool{}
		var last int64
		for pages := 0; ; pages++ {
			page := list(inbox.DeadLetterFilter{AfterID: last, Limit: 2})
			if len(page) == 0 {
				break
			}
			if pages > 10 || len(page) > 2 {
				t.Fatalf("page %d has %d letters", pages, len(page))
			}
			for _, dl := range page {
				if seen[dl.ID] || dl.ID <= last {
					t.Fatalf("dead letter %d came twice or out of order (after %d)", dl.ID, last)
				}
				seen[dl.ID], last = true, dl.ID
			}
		}
		if len(seen) != 8 {
			t.Fatalf("pages visited %d letters, want 8", len(seen))
		}

		for _, f := range []inbox.DeadLetterFilter{{Limit: inbox.MaxListLimit + 1}, {Limit: -1}, {AfterID: -1},
			{ReasonContains: strings.Repeat("x", inbox.MaxReasonBytes+1)}, {Since: before, Until: before}} {
			var ie *idem.InputError
			if _, err := a.List(ctx, f); !errors.As(err, &ie) {
				t.Errorf("List(%+v) = %v, want an InputError", f, err)
			}
		}

		dl := get(t, a, idsA["order-00003"])
		if dl.Consumer != "a" || dl.Message.ID != "order-00003" || !strings.HasSuffix(dl.Reason, "unknown sku") || dl.State != inbox.StatePending ||
			dl.Message.Headers["why"] != "unknown sku" || dl.DeadAt.Before(before) {
			t.Errorf("Get = %+v", dl)
		}
		if _, err := a.Get(ctx, 1<<40); !errors.Is(err, inbox.ErrNoDeadLetter) {
			t.Errorf("Get of an unknown id = %v, want ErrNoDeadLetter", err)
		}
	})
}

func TestDiscardedDeadLetterIsNeverReplayed(t *testing.T) {
	t.Parallel()
	forEachDialect(t, func(t *testing.T, b bundle) {
		ctx := context.Background()
		a := inbox.NewDeadLetterAdmin(b.txdb)
		ids := deadLetter(t, b, "ledger", why(1, "downstream down"), why(2, "downstream down"))
		id := ids["order-00001"]
		var ie *idem.InputError
		if err := a.Discard(ctx, id, " "); !errors.As(err, &ie) || ie.Field != "reason" {
			t.Fatalf("Discard without a reason = %v, want an InputError on reason", err)
		}
		if err := a.Discard(ctx, id, "refunded by hand, ticket 42"); err != nil {
			t.Fatal(err)
		}
		dl := get(t, a, id)
		if dl.State != inbox.StateDiscarded || dl.DiscardReason != "refunded by hand, ticket 42" || dl.DiscardedAt.IsZero() {
			t.Fatalf("discarded letter = %+v", dl)
		}
		if err := a.Discard(ctx, id, "again"); !errors.Is(err, inbox.ErrDeadLetterClosed) {
			t.Errorf("second Discard = %v, want ErrDeadLetterClosed", err)
		}
		if err := a.Discard(ctx, 1<<40, "x"); !errors.Is(err, inbox.ErrNoDeadLetter) {
			t.Errorf("Discard of an unknown id = %v, want ErrNoDeadLetter", err)
		}
		open, _ := a.List(ctx, inbox.DeadLetterFilter{})
		all, _ := a.List(ctx, inbox.DeadLetterFilter{IncludeDone: true})
		if len(open) != 1 || open[0].ID != ids["order-00002"] || len(all) != 2 {
			t.Fatalf("List: open %+v, all %+v; want the discarded one only with IncludeDone", open, all)
		}
		reqs, err := a.RequestReplay(ctx, []int64{id, ids["order-00002"], 1 << 40}, "downstream is back")
		if err != nil {
			t.Fatal(err)
		}
		if reqs[0].Outcome != inbox.ReplayAlreadyDone || reqs[1].Outcome != inbox.ReplayRequested || reqs[2].Outcome != inbox.ReplayNotFound {
			t.Fatalf("RequestReplay = %+v; want already_done, requested, not_found", reqs)
		}

		var calls handlerCalls
		c := newConsumer(t, b, newFakeBroker(), gate(&calls, func(idem.Message) error { return nil }),
			inbox.Config{ReplayPollInterval: 5 * time.Millisecond})
		if _, err := c.Replay(ctx, id); !errors.Is(err, inbox.ErrNoDeadLetter) {
			t.Errorf("Replay of a discarded letter = %v, want ErrNoDeadLetter", err)
		}
		runConsumer(t, c)
		waitFor(t, "the requested replay", func() bool { return get(t, a, ids["order-00002"]).State == inbox.StateReplayed })
		if n := calls.get("order-00001"); n != 0 {
			t.Fatalf("the discarded letter's handler ran %d times", n)
		}
		if dl := get(t, a, id); dl.State != inbox.StateDiscarded {
			t.Fatalf("discarded letter is now %s", dl.State)
		}
	})
}

func TestRequestedReplay(t *testing.T) {
	t.Parallel()
	forEachDialect(t, func(t *testing.T, b bundle) {
		ctx := context.Background()
		a := inbox.NewDeadLetterAdmin(b.txdb)
		ids := deadLetter(t, b, "ledger", why(1, "downstream down"), why(2, "downstream down"), why(3, "downstream down"))
		// order-2 is applied meanwhile (a copy delivered once the downstream was back).
		var calls handlerCalls
		var broken atomic.Bool // order-3 fails while set
		broken.Store(true)
		h := gate(&calls, func(m idem.Message) error {
			if m.ID == "order-00003" && broken.Load() {
				return errTransient
			}
			return nil
		})
		fb := newFakeBroker()
		reg := prometheus.NewRegistry()
		c := newConsumer(t, b, fb, h, inbox.Config{ReplayPollInterval: 5 * time.Millisecond, MaxReplayAttempts: 1000, Registerer: reg})
		fb.Publish(ctx, order(2))
		drain(t, c, fb)

		if _, err := a.RequestReplay(ctx, []int64{ids["order-00001"], ids["order-00002"], ids["order-00003"]}, "fixed"); err != nil {
			t.Fatal(err)
		}
		if dl := get(t, a, ids["order-00003"]); dl.State != inbox.StateReplayRequested || dl.ReplayReason != "fixed" || dl.ReplayRequestedAt.IsZero() {
			t.Fatalf("requested letter = %+v", dl)
		}
		before2 := calls.get("order-00002")
		stop := runConsumer(t, c)
		waitFor(t, "replays of order-1 and order-2", func() bool {
			return get(t, a, ids["order-00001"]).State == inbox.StateReplayed && get(t, a, ids["order-00002"]).State == inbox.StateReplayed
		})
		if dl := get(t, a, ids["order-00001"]); dl.ReplayNote != "applied" || dl.ReplayedAt.IsZero() {
			t.Errorf("order-1 = %+v, want applied", dl)
		}
		if dl := get(t, a, ids["order-00002"]); dl.ReplayNote != "already applied" {
			t.Errorf("order-2 = %+v, want already applied", dl)
		}
		if n := calls.get("order-00002"); n != before2 {
			t.Errorf("the handler ran for order-2, already applied, %d more times", n-before2)
		}
		// order-3's handler keeps failing: it stays requested, with its error and tries.
		waitFor(t, "two failed tries of order-3", func() bool { return get(t, a, ids["order-00003"]).ReplayAttempts >= 2 })
		if dl := get(t, a, ids["order-00003"]); dl.State != inbox.StateReplayRequested || !strings.Contains(dl.LastReplayError, errTransient.Error()) {
			t.Fatalf("failing order-3 = %+v, want still requested with its error", dl)
		}
		broken.Store(false)
		waitFor(t, "order-3 replayed once the handler works", func() bool { return get(t, a, ids["order-00003"]).State == inbox.StateReplayed })
		exactLedgerIDs(t, b.db, "order-00001", "order-00002", "order-00003")
		stop() // Run returns after its poll, which counts a replay after its commit
		if got := idemtest.MetricValue(t, reg, "idem_inbox_replays_total", map[string]string{"consumer": "ledger", "outcome": "already_applied"}); got != 1 {
			t.Errorf("idem_inbox_replays_total{outcome=already_applied} = %v, want 1", got)
		}
		if got := idemtest.MetricValue(t, reg, "idem_inbox_replays_total", map[string]string{"consumer": "ledger", "outcome": "applied"}); got != 2 {
			t.Errorf("idem_inbox_replays_total{outcome=applied} = %v, want 2", got)
		}
	})
}

// exactLedgerIDs fails t unless the ledger holds each of ids once and nothing else.
func exactLedgerIDs(t *testing.T, db *sql.DB, ids ...string) {
	t.Helper()
	rows, distinct, _ := ledger(t, db)
	if rows != len(ids) || distinct != len(ids) {
		t.Fatalf("ledger has %d rows (%d distinct), want %d: %v", rows, distinct, len(ids), ids)
	}
	for _, id := range ids {
		if n := ledgerRows(t, db, id); n != 1 {
			t.Fatalf("ledger has %s %d times, want once", id, n)
		}
	}
}

func TestRequestedReplayGivesUp(t *testing.T) {
	t.Parallel()
	forEachDialect(t, func(t *testing.T, b bundle) {
		ctx := context.Background()
		a := inbox.NewDeadLetterAdmin(b.txdb)
		id := deadLetter(t, b, "ledger", why(1, "downstream down"))["order-00001"]
		var calls handlerCalls
		c := newConsumer(t, b, newFakeBroker(), gate(&calls, func(idem.Message) error { return errTransient }),
			inbox.Config{ReplayPollInterval: 5 * time.Millisecond, MaxReplayAttempts: 3})
		if _, err := a.RequestReplay(ctx, []int64{id}, ""); err != nil {
			t.Fatal(err)
		}
		runConsumer(t, c)
		waitFor(t, "the consumer to give up", func() bool { return get(t, a, id).State == inbox.StatePending })
		dl := get(t, a, id)
		if dl.ReplayAttempts != 3 || !strings.HasPrefix(dl.LastReplayError, "gave up: ") || calls.get("order-00001") != 3 {
			t.Fatalf("given-up letter = %+v after %d handler calls; want 3 tries and the error", dl, calls.get("order-00001"))
		}
	})
}

func TestConsumersReplayOnlyTheirOwnLetters(t *testing.T) {
	t.Parallel()
	forEachDialect(t, func(t *testing.T, b bundle) {
		ctx := context.Background()
		a := inbox.NewDeadLetterAdmin(b.txdb)
		idA := deadLetter(t, b, "a", why(1, "down"))["order-00001"]
		idB := deadLetter(t, b, "b", why(2, "down"))["order-00002"]
		if _, err := a.RequestReplay(ctx, []int64{idA, idB}, "fixed"); err != nil {
			t.Fatal(err)
		}
		var callsA, callsB handlerCalls
		ok := func(idem.Message) error { return nil }
		ca := newConsumer(t, b, newFakeBroker(), gate(&callsA, ok), inbox.Config{Consumer: "a", ReplayPollInterval: 5 * time.Millisecond})
		stopA := runConsumer(t, ca)
		waitFor(t, "a's letter replayed", func() bool { return get(t, a, idA).State == inbox.StateReplayed })
		// a polls a few more times; b's letter stays b's.
		for range 3 {
			if _, err := ca.ReplayRequested(ctx); err != nil {
				t.Fatal(err)
			}
		}
		stopA()
		if dl := get(t, a, idB); dl.State != inbox.StateReplayRequested || callsA.get("order-00002") != 0 {
			t.Fatalf("b's letter = %+v after consumer a ran (a's handler saw it %d times)", dl, callsA.get("order-00002"))
		}
		cb := newConsumer(t, b, newFakeBroker(), gate(&callsB, ok), inbox.Config{Consumer: "b", ReplayPollInterval: -1})
		if n, err := cb.ReplayRequested(ctx); err != nil || n != 1 {
			t.Fatalf("b's ReplayRequested = %d, %v; want 1", n, err)
		}
		if callsB.get("order-00002") != 1 || callsB.get("order-00001") != 0 {
			t.Fatalf("b's handler calls: %v", callsB.n)
		}
	})
}

func TestConcurrentReplayRequestsApplyOnce(t *testing.T) {
	t.Parallel()
	forEachDialect(t, func(t *testing.T, b bundle) {
		ctx := context.Background()
		a := inbox.NewDeadLetterAdmin(b.txdb)
		const n = 10
		var msgs []idem.Message
		for i := range n {
			msgs = append(msgs, why(i, "down"))
		}
		byMsg := deadLetter(t, b, "ledger", msgs...)
		var ids []int64
		var want []string
		for id, dl := range byMsg {
			want, ids = append(want, id), append(ids, dl)
		}
		var calls handlerCalls
		c := newConsumer(t, b, newFakeBroker(), gate(&calls, func(idem.Message) error { return nil }),
			inbox.Config{ReplayPollInterval: time.Millisecond})
		runConsumer(t, c)
		var wg sync.WaitGroup
		errs := make(chan error, 8)
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 3 {
					reqs, err := a.RequestReplay(ctx, ids, "fixed")
					if err != nil {
						errs <- err
						return
					}
					for _, r := range reqs {
						if r.Outcome != inbox.ReplayRequested && r.Outcome != inbox.ReplayAlreadyDone {
							errs <- fmt.Errorf("RequestReplay outcome %+v", r)
							return
						}
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		waitFor(t, "every letter replayed", func() bool {
			open, err := a.List(ctx, inbox.DeadLetterFilter{})
			return err == nil && len(open) == 0
		})
		exactLedgerIDs(t, b.db, want...)
	})
}
