package queue_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/inbox"
	"github.com/idemhq/idem/queue"
)

// clock is a test's settable clock.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Set(t time.Time) {
	c.mu.Lock()
	c.now = t
	c.mu.Unlock()
}

// metric returns the value of the series name{labels} in reg, and whether it
// exists.
func metric(t testing.TB, reg prometheus.Gatherer, name string, labels ...string) (float64, bool) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, m := range mf.GetMetric() {
			have := map[string]string{}
			for _, lp := range m.GetLabel() {
				have[lp.GetName()] = lp.GetValue()
			}
			for i := 0; i+1 < len(labels); i += 2 {
				if have[labels[i]] != labels[i+1] {
					continue series
				}
			}
			if m.Counter != nil {
				return m.Counter.GetValue(), true
			}
			return m.Gauge.GetValue(), true
		}
	}
	return 0, false
}

func wantMetric(t testing.TB, reg prometheus.Gatherer, want float64, name string, labels ...string) {
	t.Helper()
	if got, _ := metric(t, reg, name, labels...); got != want {
		t.Errorf("%s%v = %v, want %v", name, labels, got, want)
	}
}

// TestOperatorView: Status counts each topic's messages by state (ready,
// running, retrying, scheduled) and the age of its oldest ready one;
// Unfinished and Finished page through the rows; Cancel finishes one; the
// metrics count what the producers, Sources and Run did, and Run's gauges say
// the same as Status, down to 0 once a topic drained.
func TestOperatorView(t *testing.T) {
	for _, kind := range kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			d := openDB(t, kind)
			base := time.UnixMilli(1_800_000_000_000)
			clk := &clock{now: base}
			reg := prometheus.NewRegistry()
			q := newQueue(t, d, queue.Config{Now: clk.Now, Registerer: reg, GaugeInterval: time.Millisecond})
			err := d.tx.InTx(ctx, func(tx *sql.Tx) error {
				_, err := q.InsertTx(ctx, tx,
					queue.Job{Message: idem.Message{ID: "a1", Topic: "a", OrderingKey: "k1"}},
					queue.Job{Message: idem.Message{ID: "a2", Topic: "a"}},
					queue.Job{Message: idem.Message{ID: "a3", Topic: "a"}, RunAt: base.Add(time.Hour)},
					queue.Job{Message: idem.Message{ID: "b1", Topic: "b"}},
					queue.Job{Message: idem.Message{ID: "b2", Topic: "b"}})
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
			err = d.tx.InTx(ctx, func(tx *sql.Tx) error {
				res, err := q.InsertTx(ctx, tx, queue.Job{Message: idem.Message{ID: "b1", Topic: "b"}})
				if err == nil && !res[0].Duplicate {
					t.Error("b1 enqueued twice is not a duplicate")
				}
				return err
			})
			if err != nil {
				t.Fatal(err)
			}

			src := newSource(t, q, queue.SourceConfig{Topic: "a", Worker: "worker-7"})
			ds, err := src.Receive(ctx, 1)
			if err != nil || len(ds) != 1 || ds[0].ID != "a1" {
				t.Fatalf("first claim %v, %v", ds, err)
			}
			if err := ds[0].Settler.Nak(ctx, time.Hour); err != nil {
				t.Fatal(err)
			}
			ds, err = src.Receive(ctx, 1)
			if err != nil || len(ds) != 1 || ds[0].ID != "a2" {
				t.Fatalf("second claim %v, %v", ds, err)
			}
			clk.Set(base.Add(5 * time.Second))

			st, err := q.Status(ctx)
			if err != nil {
				t.Fatal(err)
			}
			want := []queue.TopicStatus{
				{Topic: "a", Running: 1, Retrying: 1, Scheduled: 1},
				{Topic: "b", Ready: 2, OldestReadyAge: 5 * time.Second},
			}
			if len(st) != 2 || st[0] != want[0] || st[1] != want[1] {
				t.Fatalf("status %+v, want %+v", st, want)
			}

			var all []queue.Info
			for after := int64(0); ; {
				page, err := q.Unfinished(ctx, "", after, 2)
				if err != nil {
					t.Fatal(err)
				}
				all = append(all, page...)
				if len(page) < 2 {
					break
				}
				after = page[len(page)-1].ID
			}
			states := map[string]string{}
			for i, in := range all {
				if i > 0 && in.ID <= all[i-1].ID {
					t.Errorf("unfinished out of id order: %+v", all)
				}
				states[in.MessageID] = in.State(clk.Now())
			}
			if len(all) != 5 || states["a1"] != "retrying" || states["a2"] != "running" || states["a3"] != "scheduled" || states["b1"] != "ready" {
				t.Fatalf("unfinished %+v, states %v", all, states)
			}
			as, err := q.Unfinished(ctx, "a", 0, 0)
			if err != nil || len(as) != 3 {
				t.Fatalf("unfinished of a: %+v, %v", as, err)
			}
			if a1 := as[0]; a1.MessageID != "a1" || a1.OrderingKey != "k1" || a1.Attempts != 1 || a1.LeasedBy != "" ||
				!a1.CreatedAt.Equal(base) || !a1.AvailableAt.Equal(base.Add(time.Hour)) || !a1.FinishedAt.IsZero() || a1.Outcome != "" {
				t.Errorf("a1 %+v", a1)
			}
			if a2 := as[1]; a2.LeasedBy != "worker-7" || a2.Attempts != 1 || !a2.AvailableAt.Equal(base.Add(queue.DefaultLease)) {
				t.Errorf("a2 %+v", a2)
			}

			if err := q.Cancel(ctx, "b", "b1", "ordered by mistake"); err != nil {
				t.Fatal(err)
			}
			if err := q.Cancel(ctx, "b", "b1", "again"); !errors.Is(err, queue.ErrNotUnfinished) || !errors.Is(err, idem.ErrNotFound) {
				t.Errorf("second cancel: %v", err)
			}
			fin, err := q.Finished(ctx, "", 0, 0)
			if err != nil || len(fin) != 1 {
				t.Fatalf("finished %+v, %v", fin, err)
			}
			if b1 := fin[0]; b1.MessageID != "b1" || b1.Outcome != "cancelled" || b1.LastError != "ordered by mistake" ||
				!b1.FinishedAt.Equal(clk.Now()) || b1.State(clk.Now()) != "cancelled" {
				t.Errorf("cancelled b1 %+v", b1)
			}
			if more, err := q.Finished(ctx, "", fin[0].ID, 0); err != nil || len(more) != 0 {
				t.Errorf("finished before b1: %+v, %v", more, err)
			}
			if none, err := q.Finished(ctx, "a", 0, 0); err != nil || len(none) != 0 {
				t.Errorf("finished of a: %+v, %v", none, err)
			}
			for _, limit := range []int{-1, queue.MaxListLimit + 1} {
				var ie *idem.InputError
				if _, err := q.Unfinished(ctx, "", 0, limit); !errors.As(err, &ie) || ie.Field != "limit" {
					t.Errorf("limit %d: %v", limit, err)
				}
			}

			wantMetric(t, reg, 3, "idem_queue_enqueued_total", "topic", "a", "outcome", "written")
			wantMetric(t, reg, 2, "idem_queue_enqueued_total", "topic", "b", "outcome", "written")
			wantMetric(t, reg, 1, "idem_queue_enqueued_total", "topic", "b", "outcome", "duplicate")
			wantMetric(t, reg, 2, "idem_queue_claimed_total", "topic", "a")
			wantMetric(t, reg, 1, "idem_queue_settled_total", "topic", "a", "outcome", "nacked")

			go q.Run(ctx)
			gauge := func(want float64, name string, labels ...string) {
				t.Helper()
				eventually(t, fmt.Sprint(name, labels, " = ", want), func() bool {
					got, ok := metric(t, reg, name, labels...)
					return ok && got == want
				})
			}
			gauge(1, "idem_queue_messages", "topic", "a", "state", "running")
			gauge(1, "idem_queue_messages", "topic", "a", "state", "retrying")
			gauge(1, "idem_queue_messages", "topic", "a", "state", "scheduled")
			gauge(1, "idem_queue_messages", "topic", "b", "state", "ready")
			gauge(5, "idem_queue_oldest_ready_age_seconds", "topic", "b")

			// A consumer drains b: the gauges fall to 0, and its message counts
			// as applied once its transaction committed.
			bs := newSource(t, q, queue.SourceConfig{Topic: "b"})
			con, err := inbox.New(ctx, bs, d.tx, d.store, func(context.Context, *sql.Tx, idem.Message) error { return nil },
				inbox.Config{Consumer: "b", Logger: quiet})
			if err != nil {
				t.Fatal(err)
			}
			go con.Run(ctx)
			eventually(t, "b2 applied", func() bool {
				got, _ := metric(t, reg, "idem_queue_settled_total", "topic", "b", "outcome", "applied")
				return got == 1
			})
			clk.Set(base.Add(6 * time.Second))
			gauge(0, "idem_queue_messages", "topic", "b", "state", "ready")
			gauge(0, "idem_queue_oldest_ready_age_seconds", "topic", "b")
			wantMetric(t, reg, 1, "idem_queue_claimed_total", "topic", "b")
		})
	}
}

// TestMetricsOfTrouble: what the operator must hear about is counted: a
// settle of a message no longer the Source's (cancelled meanwhile), in the
// consumer's transaction and after it; a row that cannot be delivered; a
// periodic tick, enqueued by one of two processes and found taken by the
// other.
func TestMetricsOfTrouble(t *testing.T) {
	for _, kind := range kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			d := openDB(t, kind)
			reg := prometheus.NewRegistry()
			tick := queue.Periodic{Name: "heartbeat", Schedule: "@every 1s",
				Message: func(time.Time) idem.Message { return idem.Message{Topic: "beats"} }}
			q := newQueue(t, d, queue.Config{Registerer: reg, Periodic: []queue.Periodic{tick}})
			err := d.tx.InTx(ctx, func(tx *sql.Tx) error {
				_, err := q.EnqueueTx(ctx, tx, idem.Message{ID: "t1", Topic: "t"}, idem.Message{ID: "t2", Topic: "t"})
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
			src := newSource(t, q, queue.SourceConfig{Topic: "t"})
			ds, err := src.Receive(ctx, 2)
			if err != nil || len(ds) != 2 {
				t.Fatalf("claim %v, %v", ds, err)
			}
			for _, id := range []string{"t1", "t2"} {
				if err := q.Cancel(ctx, "t", id, "operator"); err != nil {
					t.Fatal(err)
				}
			}
			err = d.tx.InTx(ctx, func(tx *sql.Tx) error { return src.SettleTx(ctx, tx, ds[:1], []string{"applied"}) })
			if !errors.Is(err, queue.ErrLeaseLost) {
				t.Fatalf("SettleTx of a cancelled message: %v", err)
			}
			if err := ds[1].Settler.Ack(ctx); !errors.Is(err, queue.ErrLeaseLost) {
				t.Fatalf("Ack of a cancelled message: %v", err)
			}
			wantMetric(t, reg, 2, "idem_queue_settled_total", "topic", "t", "outcome", "lease_lost")
			if got, ok := metric(t, reg, "idem_queue_settled_total", "topic", "t", "outcome", "applied"); ok {
				t.Errorf("applied counted %v for a settle that failed", got)
			}

			// A row written by something else than InsertTx, its headers not JSON.
			d.exec(t, `INSERT INTO idem_queue (msg_id, topic, ordering_key, headers, payload, created_at, available_at)
				VALUES ('bad', 'raw', '', 'not json', $1, 0, 0)`, []byte("x"))
			raw := newSource(t, q, queue.SourceConfig{Topic: "raw"})
			eventually(t, "the bad row parked", func() bool {
				rctx, rcancel := context.WithTimeout(ctx, 100*time.Millisecond)
				defer rcancel()
				if ds, _ := raw.Receive(rctx, 1); len(ds) != 0 { // the bad row is never delivered
					t.Fatalf("delivered %v", ds)
				}
				got, _ := metric(t, reg, "idem_queue_parked_total", "topic", "raw")
				return got == 1
			})

			// Two processes run the schedule: each tick is enqueued by one.
			reg2 := prometheus.NewRegistry()
			q2 := newQueue(t, d, queue.Config{Registerer: reg2, Periodic: []queue.Periodic{tick}})
			go q.Run(ctx)
			go q2.Run(ctx)
			ticks := func(outcome string) float64 {
				a, _ := metric(t, reg, "idem_queue_periodic_total", "schedule", "heartbeat", "outcome", outcome)
				b, _ := metric(t, reg2, "idem_queue_periodic_total", "schedule", "heartbeat", "outcome", outcome)
				return a + b
			}
			eventually(t, "ticks enqueued by one process, found taken by the other", func() bool {
				return ticks("enqueued") >= 1 && ticks("taken") >= 1
			})
			if n := ticks("failed"); n != 0 {
				t.Errorf("%v ticks failed", n)
			}
		})
	}
}
