package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/outbox"
)

// part is the outbox's partition of a message (the documented fnv32a % 64).
func part(orderingKey string) int {
	h := fnv.New32a()
	h.Write([]byte(orderingKey))
	return int(h.Sum32() % outbox.Partitions)
}

func enqueue(t *testing.T, e env, msgs ...idem.Message) {
	t.Helper()
	tx, err := e.db.BeginTx(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if _, err := e.ob.EnqueueTx(context.Background(), tx, msgs...); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
}

func msg(id, topic, key string) idem.Message {
	return idem.Message{ID: id, Topic: topic, OrderingKey: key, Payload: []byte(id)}
}

func findPartition(st outbox.Status, topic string, p int) outbox.PartitionStatus {
	for _, ps := range st.Partitions {
		if ps.Topic == topic && ps.Partition == p {
			return ps
		}
	}
	return outbox.PartitionStatus{Topic: topic, Partition: p}
}

func TestAdminStatusCountsTheBacklog(t *testing.T) {
	t.Parallel()
	forEachDB(t, func(t *testing.T, e env) {
		ctx := context.Background()
		a := outbox.NewAdmin(e.tx)
		if part("k1") == part("k2") {
			t.Fatal("test keys share a partition")
		}
		enqueue(t, e, msg("o1", "orders", "k1"), msg("o2", "orders", "k1"), msg("o3", "orders", "k2"),
			msg("p1", "payments", "k1"), msg("poison", "payments", "k2"))
		// o1 was written an hour ago.
		if _, err := e.db.Exec("UPDATE idem_outbox SET created_at = created_at - 3600000 WHERE msg_id = 'o1'"); err != nil {
			t.Fatal(err)
		}
		st, err := a.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]int64{"orders/k1": 2, "orders/k2": 1, "payments/k1": 1, "payments/k2": 1}
		for tk, n := range want {
			topic, key, _ := strings.Cut(tk, "/")
			if got := findPartition(st, topic, part(key)); got.Unpublished != n || got.Parked != 0 {
				t.Errorf("%s: %+v, want %d unpublished", tk, got, n)
			}
		}
		if len(st.Partitions) != 4 || st.Unpublished != 5 {
			t.Errorf("Status = %+v; want 4 partitions, 5 unpublished", st)
		}
		if age := findPartition(st, "orders", part("k1")).OldestAge; age < time.Hour || age > 2*time.Hour {
			t.Errorf("oldest age of orders/k1 = %v, want about an hour", age)
		}
		if age := findPartition(st, "orders", part("k2")).OldestAge; age >= time.Hour {
			t.Errorf("oldest age of orders/k2 = %v, want under an hour", age)
		}
		if st.OldestAge < time.Hour {
			t.Errorf("overall oldest age = %v, want about an hour", st.OldestAge)
		}

		// The relay publishes all but poison, which it parks; discarding it moves it.
		sink := &memSink{fail: func(m idem.Message) error {
			if m.ID == "poison" {
				return errors.New("broker refused poison")
			}
			return nil
		}}
		r, err := e.ob.Relay(sink, outbox.RelayConfig{MaxAttempts: 1})
		if err != nil {
			t.Fatal(err)
		}
		drainRelay(t, r)
		if st, err = a.Status(ctx); err != nil {
			t.Fatal(err)
		}
		if p := findPartition(st, "payments", part("k2")); len(st.Partitions) != 1 || p.Unpublished != 0 || p.Parked != 1 || p.OldestAge != 0 {
			t.Fatalf("Status after the relay = %+v; want only poison, parked", st)
		}
		parked, err := a.Parked(ctx, 0, 10)
		if err != nil || len(parked) != 1 {
			t.Fatalf("Parked = %+v, %v", parked, err)
		}
		if err := a.Discard(ctx, parked[0].ID, "poison pill, ticket 7"); err != nil {
			t.Fatal(err)
		}
		if st, err = a.Status(ctx); err != nil {
			t.Fatal(err)
		}
		if p := findPartition(st, "payments", part("k2")); p.Parked != 0 || p.Discarded != 1 || st.Parked != 0 || st.Discarded != 1 {
			t.Fatalf("Status after Discard = %+v; want poison discarded, not parked", st)
		}

		// The relay above reported itself; one silent for a minute is stale, one silent
		// for two days is no longer listed.
		now := time.Now().UnixMilli()
		for _, old := range []struct {
			name string
			ago  time.Duration
		}{{"silent-minute", time.Minute}, {"silent-days", 48 * time.Hour}} {
			if _, err := e.db.Exec(`INSERT INTO idem_outbox_relays (instance, host, pid, started_at, last_round_at, poll_interval_ms, published_total, last_error)
				VALUES ($1, 'h', 1, 0, $2, 1000, 7, 'broker down')`, old.name, now-old.ago.Milliseconds()); err != nil {
				t.Fatal(err)
			}
		}
		if st, err = a.Status(ctx); err != nil {
			t.Fatal(err)
		}
		relays := map[string]outbox.RelayInstance{}
		for _, ri := range st.Relays {
			relays[ri.Instance] = ri
		}
		if len(relays) != 2 || !relays["silent-minute"].Stale || relays["silent-minute"].LastError != "broker down" {
			t.Fatalf("relays = %+v; want this test's relay and silent-minute, stale", st.Relays)
		}
		for name, ri := range relays {
			if name != "silent-minute" && (ri.Stale || ri.PublishedTotal != 4) {
				t.Errorf("the test's relay = %+v; want fresh, 4 published", ri)
			}
		}
	})
}

func TestAdminDiscardedIsNeverPublished(t *testing.T) {
	t.Parallel()
	forEachDB(t, func(t *testing.T, e env) {
		ctx := context.Background()
		a := outbox.NewAdmin(e.tx)
		enqueue(t, e, msg("poison", "orders", ""), msg("flaky", "orders", ""))
		broken := true
		sink := &memSink{fail: func(m idem.Message) error {
			if broken {
				return fmt.Errorf("broker refused %s", m.ID)
			}
			return nil
		}}
		r, err := e.ob.Relay(sink, outbox.RelayConfig{MaxAttempts: 1, BatchSize: 1})
		if err != nil {
			t.Fatal(err)
		}
		for range 2 { // a round that parks publishes nothing
			if _, err := r.RunOnce(ctx); err != nil {
				t.Fatal(err)
			}
		}
		parked, err := a.Parked(ctx, 0, 10)
		if err != nil || len(parked) != 2 || parked[0].Message.ID != "poison" || parked[1].Message.ID != "flaky" {
			t.Fatalf("Parked = %+v, %v; want poison and flaky", parked, err)
		}
		poison, flaky := parked[0].ID, parked[1].ID
		// Pages of one visit each once.
		if page, err := a.Parked(ctx, poison, 1); err != nil || len(page) != 1 || page[0].ID != flaky {
			t.Fatalf("second page = %+v, %v; want flaky", page, err)
		}
		if page, err := a.Parked(ctx, flaky, 1); err != nil || len(page) != 0 {
			t.Fatalf("third page = %+v, %v; want none", page, err)
		}
		var ie *idem.InputError
		if _, err := a.Parked(ctx, 0, outbox.MaxListLimit+1); !errors.As(err, &ie) {
			t.Errorf("Parked with too large a limit = %v, want an InputError", err)
		}
		if err := a.Discard(ctx, poison, ""); !errors.As(err, &ie) || ie.Field != "reason" {
			t.Fatalf("Discard without a reason = %v, want an InputError on reason", err)
		}
		if err := a.Discard(ctx, poison, "bad payload"); err != nil {
			t.Fatal(err)
		}
		if err := a.Discard(ctx, poison, "again"); !errors.Is(err, outbox.ErrNotParked) {
			t.Errorf("second Discard = %v, want ErrNotParked", err)
		}
		if err := a.Retry(ctx, poison); !errors.Is(err, outbox.ErrNotParked) {
			t.Errorf("Admin.Retry of a discarded message = %v, want ErrNotParked", err)
		}
		if err := e.ob.Retry(ctx, poison); !errors.Is(err, outbox.ErrNotParked) {
			t.Errorf("Outbox.Retry of a discarded message = %v, want ErrNotParked", err)
		}
		parked, _ = a.Parked(ctx, 0, 10)
		if len(parked) != 2 || parked[0].DiscardReason != "bad payload" || parked[0].DiscardedAt.IsZero() || !parked[1].DiscardedAt.IsZero() {
			t.Fatalf("Admin.Parked after Discard = %+v; want poison with its reason, flaky not discarded", parked)
		}
		if still, err := e.ob.Parked(ctx, 10); err != nil || len(still) != 1 || still[0].ID != flaky {
			t.Fatalf("Outbox.Parked = %+v, %v; want flaky only", still, err)
		}

		// The broker is back; flaky is retried; a running relay publishes it and new
		// messages, never poison, and reports itself.
		broken = false
		if err := a.Retry(ctx, flaky); err != nil {
			t.Fatal(err)
		}
		run, err := e.ob.Relay(sink, outbox.RelayConfig{Instance: "relay-" + e.name, PollInterval: 10 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		rctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- run.Run(rctx) }()
		defer func() {
			cancel()
			if err := <-done; !errors.Is(err, context.Canceled) {
				t.Errorf("Run = %v", err)
			}
		}()
		enqueue(t, e, msg("after-1", "orders", ""))
		relay := func() outbox.RelayInstance {
			st, err := a.Status(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for _, ri := range st.Relays {
				if ri.Instance == "relay-"+e.name {
					return ri
				}
			}
			return outbox.RelayInstance{}
		}
		waitUntil(t, "flaky, after-1 and the relay's report", func() bool {
			return slices.Contains(sink.ids(), "flaky") && slices.Contains(sink.ids(), "after-1") && relay().PublishedTotal >= 2
		})
		first := relay()
		if first.Stale || first.Host == "" || first.PID == 0 || first.PollInterval != 10*time.Millisecond || first.LastError != "" {
			t.Errorf("relay instance = %+v", first)
		}
		for i := range 5 {
			enqueue(t, e, msg(fmt.Sprint("later-", i), "orders", ""))
		}
		waitUntil(t, "the relay's count to rise", func() bool { return relay().PublishedTotal >= first.PublishedTotal+5 })
		if slices.Contains(sink.ids(), "poison") {
			t.Fatal("the relay published a discarded message")
		}
	})
}

// waitUntil polls cond until it holds, failing t after a minute.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("still waiting after a minute for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
