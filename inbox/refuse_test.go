package inbox_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemkey"
	"github.com/idemhq/idem/idempg"
	"github.com/idemhq/idem/idemseq"
	"github.com/idemhq/idem/idemtest"
	"github.com/idemhq/idem/inbox"
)

// receiverNow is the consumer's clock in these tests: fixed, so nothing depends on
// how fast the machine runs.
var receiverNow = time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)

// keyAt is a UUIDv7 key minted by a clock reading t.
func keyAt(t time.Time) string {
	g := idemkey.Generator{Now: func() time.Time { return t }}
	return g.V7()
}

// refusalCase is one message and what the consumer must do with it: want is the
// dead letter kind of a refusal, or "" when the message is applied.
type refusalCase struct {
	name string
	m    idem.Message
	want string
}

// poison is a message whose handler fails permanently (credit cannot decode it).
var poison = idem.Message{ID: keyAt(receiverNow), Topic: "orders", Payload: []byte("not json")}

func refusalMsg(id string, i int, deadline string) idem.Message {
	m := idem.Message{ID: id, Topic: "orders", Headers: map[string]string{"i": fmt.Sprint(i)}, Payload: []byte(fmt.Sprintf(`{"Amount":%d}`, i+1))}
	if deadline != "" {
		m.Headers[idem.HeaderDeadline] = deadline
	}
	return m
}

func refusalCases(require bool) []refusalCase {
	now := receiverNow
	untimed := ""
	if require {
		untimed = inbox.RefusedUntimedKey
	}
	return []refusalCase{
		{"fresh key", refusalMsg(keyAt(now.Add(-59*time.Minute)), 0, ""), ""},
		{"key exactly MaxKeyAge old", refusalMsg(keyAt(now.Add(-time.Hour)), 1, ""), ""},
		{"stale key", refusalMsg(keyAt(now.Add(-time.Hour-time.Millisecond)), 2, ""), inbox.RefusedStaleKey},
		{"key ahead within MaxSkew", refusalMsg(keyAt(now.Add(idemkey.MaxSkew)), 3, ""), ""},
		{"key ahead beyond MaxSkew", refusalMsg(keyAt(now.Add(idemkey.MaxSkew+time.Millisecond)), 4, ""), inbox.RefusedFutureKey},
		{"untimed key", refusalMsg(fmt.Sprintf("order-%d", 5), 5, ""), untimed},
		{"deadline ahead", refusalMsg(keyAt(now), 6, idem.FormatDeadline(now.Add(time.Second))), ""},
		{"deadline exactly now", refusalMsg(keyAt(now), 7, idem.FormatDeadline(now)), ""},
		{"deadline passed", refusalMsg(keyAt(now), 8, idem.FormatDeadline(now.Add(-time.Nanosecond))), inbox.RefusedDeadline},
		{"deadline not a time", refusalMsg(keyAt(now), 9, "in five minutes"), inbox.RefusedBadDeadline},
	}
}

// TestRefusedBeforeApplying: stale, future, untimed (when required) keys and passed
// or malformed deadlines are refused before the handler runs, in batches and alone,
// on every SQL store: not applied, acked once (never redelivered), dead-lettered
// with the reason as kind, counted by reason; every other message is applied once.
// A replay of a refused letter applies it: the operator has judged it.
func TestRefusedBeforeApplying(t *testing.T) {
	t.Parallel()
	forEachDialect(t, func(t *testing.T, b bundle) {
		for _, batch := range []int{1, 8} {
			for _, require := range []bool{false, true} {
				consumer := fmt.Sprintf("refuse-%d-%t", batch, require)
				cases := refusalCases(require)
				fb := newFakeBroker()
				calls := &handlerCalls{}
				reg := prometheus.NewRegistry()
				c := newConsumer(t, b, fb, gate(calls, func(idem.Message) error { return nil }), inbox.Config{Consumer: consumer,
					BatchSize: batch, Retention: time.Hour, RequireTimedKeys: require, Registerer: reg, ReplayPollInterval: -1,
					Now: func() time.Time { return receiverNow }})
				// A poison message first: its handler fails for good, so a batch
				// runs again with savepoints, which must keep the refusals prepare
				// decided.
				fb.Publish(context.Background(), poison)
				for _, tc := range cases {
					fb.Publish(context.Background(), tc.m)
				}
				if _, err := b.db.Exec("DELETE FROM ledger"); err != nil {
					t.Fatal(err)
				}
				drain(t, c, fb)
				checkRefusals(t, refusalCheck[*sql.Tx]{c: c, db: b.db, fb: fb, reg: reg, calls: calls, consumer: consumer}, cases)
			}
		}
	})
}

// refusalCheck is what checkRefusals looks at: the consumer, its ledger's
// database, broker, metrics and handler calls.
type refusalCheck[Tx any] struct {
	c        *inbox.Consumer[Tx]
	db       interface{ QueryRow(string, ...any) *sql.Row }
	fb       *fakeBroker
	reg      *prometheus.Registry
	calls    *handlerCalls
	consumer string
}

func checkRefusals[Tx any](t *testing.T, r refusalCheck[Tx], cases []refusalCase) {
	t.Helper()
	c, fb, reg, calls, consumer := r.c, r.fb, r.reg, r.calls, r.consumer
	dls, err := c.DeadLetters(context.Background(), 100)
	if err != nil {
		t.Fatal(err)
	}
	letters := map[string]inbox.DeadLetter{}
	for _, dl := range dls {
		letters[dl.Message.ID] = dl
	}
	if letters[poison.ID].Kind != "permanent" {
		t.Errorf("%s: the poison message's dead letter is %+v, want kind permanent", consumer, letters[poison.ID])
	}
	delete(letters, poison.ID)
	dls = slices.DeleteFunc(dls, func(dl inbox.DeadLetter) bool { return dl.Message.ID == poison.ID })
	refused := map[string]int{}
	for _, tc := range cases {
		id := tc.m.ID
		fb.mu.Lock()
		acks := fb.acked[id]
		fb.mu.Unlock()
		if acks != 1 {
			t.Errorf("%s: %s: acked %d times, want once", consumer, tc.name, acks)
		}
		rows := ledgerRows(t, r.db, id)
		dl, lettered := letters[id]
		if tc.want == "" {
			if calls.get(id) != 1 || rows != 1 || lettered {
				t.Errorf("%s: %s: handler ran %d times, %d ledger rows, dead letter %v; want applied once", consumer, tc.name, calls.get(id), rows, lettered)
			}
			continue
		}
		refused[tc.want]++
		if calls.get(id) != 0 || rows != 0 {
			t.Errorf("%s: %s: handler ran %d times, %d ledger rows; want refused before the handler", consumer, tc.name, calls.get(id), rows)
		}
		if !lettered || dl.Kind != tc.want || !strings.Contains(dl.Reason, "refused before applying") || dl.Message.Headers["i"] != tc.m.Headers["i"] {
			t.Errorf("%s: %s: dead letter %+v (present %v); want kind %s with the message and why", consumer, tc.name, dl, lettered, tc.want)
		}
	}
	if len(dls) != len(letters) || len(letters) != sum(refused) {
		t.Errorf("%s: %d dead letters, want %d: %+v", consumer, len(dls), sum(refused), dls)
	}
	for reason, n := range refused {
		if got := idemtest.MetricValue(t, reg, "idem_inbox_refused_total", map[string]string{"consumer": consumer, "reason": reason}); got != float64(n) {
			t.Errorf("%s: idem_inbox_refused_total{reason=%s} = %v, want %d", consumer, reason, got, n)
		}
	}
	for _, tc := range cases {
		if tc.want != inbox.RefusedDeadline && tc.want != inbox.RefusedStaleKey {
			continue
		}
		applied, err := c.Replay(context.Background(), letters[tc.m.ID].ID)
		if err != nil || !applied || calls.get(tc.m.ID) != 1 || ledgerRows(t, r.db, tc.m.ID) != 1 {
			t.Errorf("%s: Replay of the %s letter = %v, %v (handler ran %d times); want applied once", consumer, tc.want, applied, err, calls.get(tc.m.ID))
		}
	}
}

func sum(m map[string]int) (n int) {
	for _, v := range m {
		n += v
	}
	return n
}

// TestSkewedSender: a sender whose clock is off by a fixed amount. Its key and its
// deadline are both read on the receiver's clock, as docs/inbox.md says:
//   - ahead by less than MaxSkew: its key is accepted, and its deadline honoured
//     late by the skew (the receiver acts until the sender's deadline on the
//     receiver's clock, skew after the sender gave up);
//   - ahead by more than MaxSkew: its keys are refused as future_key at once;
//   - behind: its keys age early by the skew, and its deadlines pass early, so a
//     message arriving within its deadline by the sender's clock is refused.
func TestSkewedSender(t *testing.T) {
	t.Parallel()
	forEachDB(t, func(t *testing.T, b bundle) {
		const budget = 10 * time.Second // the sender's deadline: 10 s after it sends
		arrive := 5 * time.Second       // every message reaches the receiver 5 s after it was sent
		for _, tc := range []struct {
			skew time.Duration // sender clock minus receiver clock
			want string
		}{
			{0, ""},
			{45 * time.Second, ""}, // its deadline is 45 s late on the receiver's clock: applied
			{-3 * time.Second, ""}, // 2 s of the budget left on the receiver's clock
			{-6 * time.Second, inbox.RefusedDeadline}, // the sender still waits 5 s, the receiver sees the deadline passed
			{5 * time.Minute, inbox.RefusedFutureKey},
			{-59*time.Minute - 55*time.Second, inbox.RefusedDeadline}, // its key is 59m55s+5s old, exactly MaxKeyAge: fresh; its deadline long passed
			{-59*time.Minute - 56*time.Second, inbox.RefusedStaleKey}, // one second more: stale (judged before the deadline)
		} {
			consumer := fmt.Sprintf("skew-%v", tc.skew)
			fb := newFakeBroker()
			calls := &handlerCalls{}
			c := newConsumer(t, b, fb, gate(calls, func(idem.Message) error { return nil }), inbox.Config{Consumer: consumer,
				Retention: time.Hour, ReplayPollInterval: -1, Now: func() time.Time { return receiverNow }})
			sent := receiverNow.Add(-arrive).Add(tc.skew) // the sender's clock when it sent
			m := refusalMsg(keyAt(sent), 0, idem.FormatDeadline(sent.Add(budget)))
			fb.Publish(context.Background(), m)
			drain(t, c, fb)
			dls, err := c.DeadLetters(context.Background(), 10)
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case tc.want == "" && (calls.get(m.ID) != 1 || len(dls) != 0):
				t.Errorf("sender clock %v off: handler ran %d times, dead letters %+v; want applied", tc.skew, calls.get(m.ID), dls)
			case tc.want != "" && (calls.get(m.ID) != 0 || len(dls) != 1 || dls[0].Kind != tc.want):
				t.Errorf("sender clock %v off: handler ran %d times, dead letters %+v; want refused as %s", tc.skew, calls.get(m.ID), dls, tc.want)
			}
		}
	})
}

// TestRefusalsOff: MaxKeyAge < 0 and IgnoreDeadlines apply everything, as before
// the checks existed (idem verify --unsafe).
func TestRefusalsOff(t *testing.T) {
	t.Parallel()
	b := sqliteBundle(t)
	fb := newFakeBroker()
	calls := &handlerCalls{}
	c := newConsumer(t, b, fb, gate(calls, func(idem.Message) error { return nil }), inbox.Config{Retention: time.Hour, MaxKeyAge: -1,
		IgnoreDeadlines: true, ReplayPollInterval: -1, Now: func() time.Time { return receiverNow }})
	cases := refusalCases(false)
	for _, tc := range cases {
		fb.Publish(context.Background(), tc.m)
	}
	drain(t, c, fb)
	for _, tc := range cases {
		if calls.get(tc.m.ID) != 1 {
			t.Errorf("%s: handler ran %d times with the checks off, want once", tc.name, calls.get(tc.m.ID))
		}
	}
}

func TestRefusalConfig(t *testing.T) {
	t.Parallel()
	b := sqliteBundle(t)
	for _, tc := range []struct {
		cfg   inbox.Config
		field string
	}{
		{inbox.Config{Consumer: "c", Retention: time.Hour, MaxKeyAge: 2 * time.Hour}, "Config.MaxKeyAge"},
		{inbox.Config{Consumer: "c", MaxKeyAge: inbox.DefaultRetention + time.Nanosecond}, "Config.MaxKeyAge"},
		{inbox.Config{Consumer: "c", MaxKeyAge: -1, RequireTimedKeys: true}, "Config.RequireTimedKeys"},
	} {
		_, err := inbox.New(context.Background(), newFakeBroker(), b.txdb, b.store, credit, tc.cfg)
		var ie *idem.InputError
		if !errors.As(err, &ie) || ie.Field != tc.field || ie.Fix == "" {
			t.Errorf("New(%+v) = %v, want an InputError on %s with a fix", tc.cfg, err, tc.field)
		}
	}
}

// TestSequencesJudgeDeadlinesNotKeys: with WithSequences a delivery is deduplicated
// by its position, which is never forgotten, so its key's age is not judged (a stale
// key is applied); its deadline still is.
func TestSequencesJudgeDeadlinesNotKeys(t *testing.T) {
	t.Parallel()
	forEachDB(t, func(t *testing.T, b bundle) {
		ctx := context.Background()
		tracker, err := idemseq.OpenSQL(ctx, b.db, idemseq.Config{Scope: "seq-refuse"})
		if err != nil {
			t.Fatal(err)
		}
		offsetOf := func(d idem.Delivery) (string, uint64, uint64, bool) {
			off, err := strconv.ParseUint(d.Headers["offset"], 10, 64)
			return "orders/0", 0, off, err == nil
		}
		fb := newFakeBroker()
		c, err := inbox.New(ctx, fb, b.txdb, b.store, credit, inbox.Config{Consumer: "seq-refuse", Retention: time.Hour, RequireTimedKeys: true,
			ReplayPollInterval: -1, Now: func() time.Time { return receiverNow }}, inbox.WithSequences[*sql.Tx](tracker, offsetOf))
		if err != nil {
			t.Fatal(err)
		}
		stale := refusalMsg(keyAt(receiverNow.Add(-48*time.Hour)), 0, "")
		untimed := refusalMsg("order-1", 1, "")
		late := refusalMsg(keyAt(receiverNow), 2, idem.FormatDeadline(receiverNow.Add(-time.Second)))
		for i, m := range []idem.Message{stale, untimed, late} {
			m.Headers["offset"] = fmt.Sprint(i)
			fb.Publish(ctx, m)
		}
		drain(t, c, fb)
		rows, _, _ := ledger(t, b.db)
		dls, err := c.DeadLetters(ctx, 10)
		if err != nil {
			t.Fatal(err)
		}
		if rows != 2 || len(dls) != 1 || dls[0].Message.ID != late.ID || dls[0].Kind != inbox.RefusedDeadline {
			t.Fatalf("%d ledger rows, dead letters %+v; want the stale and untimed keys applied and the late one refused (deadline)", rows, dls)
		}
	})
}

// TestRefusedBeforeApplyingPgx: the same refusals on pgx transactions (idempg.TxDB
// and idempg.Store, which records a batch's keys in one statement), in a batch of 8
// with a poison message forcing the guarded rerun.
func TestRefusedBeforeApplyingPgx(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, store := pgxLedger(t, idempg.Config{})
	calls := &handlerCalls{}
	handle := func(ctx context.Context, tx pgx.Tx, m idem.Message) error {
		calls.add(m.ID)
		var p struct{ Amount int64 }
		if err := json.Unmarshal(m.Payload, &p); err != nil {
			return inbox.Permanent(err)
		}
		_, err := tx.Exec(ctx, "INSERT INTO ledger (msg_id, amount) VALUES ($1, $2)", m.ID, p.Amount)
		return err
	}
	fb := newFakeBroker()
	reg := prometheus.NewRegistry()
	c, err := inbox.New(ctx, fb, idempg.TxDB(pool), store, handle, inbox.Config{Consumer: "refuse-pgx", BatchSize: 8, Retention: time.Hour,
		RequireTimedKeys: true, Registerer: reg, Backoff: noBackoff, ReplayPollInterval: -1, Now: func() time.Time { return receiverNow }})
	if err != nil {
		t.Fatal(err)
	}
	cases := refusalCases(true)
	fb.Publish(ctx, poison)
	for _, tc := range cases {
		fb.Publish(ctx, tc.m)
	}
	drainAny(t, fb, c.Run)
	db := stdlib.OpenDBFromPool(pool)
	defer db.Close()
	checkRefusals(t, refusalCheck[pgx.Tx]{c: c, db: db, fb: fb, reg: reg, calls: calls, consumer: "refuse-pgx"}, cases)
}
