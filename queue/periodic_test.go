package queue_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/chaos"
	"github.com/idemhq/idem/queue"
)

func report(tick time.Time) idem.Message {
	return idem.Message{Topic: "reports", Payload: []byte(tick.UTC().Format(time.RFC3339))}
}

// TestEnqueueTickOnce: four Queues on one database (four processes) try the
// same ticks at once: each tick is enqueued by exactly one of them, the others
// get ErrTickTaken; an earlier tick than the last is taken too.
func TestEnqueueTickOnce(t *testing.T) {
	for _, kind := range kinds {
		t.Run(kind, func(t *testing.T) {
			d := openDB(t, kind)
			qs := make([]*queue.Queue[*sql.Tx], 4)
			for i := range qs {
				qs[i] = newQueue(t, d, queue.Config{})
			}
			p := queue.Periodic{Name: "report", Schedule: "@every 1m", Message: report}
			base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
			const ticks = 10
			for i := range ticks {
				tick := base.Add(time.Duration(i) * time.Minute)
				var wg sync.WaitGroup
				var mu sync.Mutex
				won := 0
				for _, q := range qs {
					wg.Go(func() {
						res, err := q.EnqueueTick(context.Background(), p, tick)
						switch {
						case err == nil:
							mu.Lock()
							won++
							mu.Unlock()
							if want := fmt.Sprintf("periodic:report:%d", tick.UnixMilli()); res.ID != want || res.Duplicate {
								t.Errorf("EnqueueTick: %+v, want ID %s", res, want)
							}
						case !errors.Is(err, queue.ErrTickTaken):
							t.Errorf("EnqueueTick: %v", err)
						}
					})
				}
				wg.Wait()
				if won != 1 {
					t.Fatalf("tick %d enqueued by %d processes, want 1", i, won)
				}
			}
			if n := d.count(t, "SELECT count(*) FROM idem_queue WHERE topic = 'reports'"); n != ticks {
				t.Errorf("%d messages of %d ticks", n, ticks)
			}
			if _, err := qs[0].EnqueueTick(context.Background(), p, base); !errors.Is(err, queue.ErrTickTaken) {
				t.Errorf("EnqueueTick of an earlier tick: %v, want ErrTickTaken", err)
			}
		})
	}
}

// TestRunEnqueuesTicks: Run enqueues an @every schedule's ticks, each one
// message named by its tick, the ticks multiples of the period.
func TestRunEnqueuesTicks(t *testing.T) {
	for _, kind := range kinds {
		t.Run(kind, func(t *testing.T) {
			d := openDB(t, kind)
			var clock chaos.Clock
			clock.Jump(-time.Duration(time.Now().Nanosecond())) // the second's start: the first tick is a second away
			q := newQueue(t, d, queue.Config{Now: clock.Now, Periodic: []queue.Periodic{{Name: "beat", Schedule: "@every 1s", Message: report}}})
			q2 := newQueue(t, d, queue.Config{Now: clock.Now, Periodic: []queue.Periodic{{Name: "beat", Schedule: "@every 1s", Message: report}}})
			ctx, cancel := context.WithCancel(context.Background())
			var wg sync.WaitGroup
			for _, q := range []*queue.Queue[*sql.Tx]{q, q2} {
				wg.Go(func() { q.Run(ctx) })
			}
			eventually(t, "three ticks enqueued", func() bool { return d.count(t, "SELECT count(*) FROM idem_queue WHERE topic = 'reports'") >= 3 })
			clock.Jump(time.Hour) // a jump makes one tick, not 3600, and that tick is the current one
			jumped := clock.Now().Add(-time.Second).UnixMilli()
			eventually(t, "the current tick after the jump", func() bool {
				return d.count(t, "SELECT count(*) FROM idem_queue WHERE topic = 'reports' AND created_at >= $1 AND msg_id >= $2",
					jumped, fmt.Sprintf("periodic:beat:%d", jumped)) > 0
			})
			if stale := d.count(t, "SELECT count(*) FROM idem_queue WHERE topic = 'reports' AND created_at >= $1 AND msg_id < $2",
				jumped, fmt.Sprintf("periodic:beat:%d", jumped)); stale != 0 {
				t.Errorf("%d ticks from before the jump enqueued after it: a missed tick was made up", stale)
			}
			cancel()
			wg.Wait()
			rows, err := d.db.Query("SELECT msg_id FROM idem_queue WHERE topic = 'reports'")
			if err != nil {
				t.Fatal(err)
			}
			defer rows.Close()
			total := 0
			for rows.Next() {
				var id string
				rows.Scan(&id)
				var ms int64
				if _, err := fmt.Sscanf(id, "periodic:beat:%d", &ms); err != nil || ms%1000 != 0 {
					t.Errorf("message %s: not a whole second's tick", id)
				}
				total++
			}
			if total > 3+1+3600/100 { // two Runs, each tick once: a handful, never the hour's 3600
				t.Errorf("%d ticks enqueued", total)
			}
		})
	}
}

// TestPeriodicConfigErrors: a bad Periodic is an InputError naming its field,
// from New and from EnqueueTick.
func TestPeriodicConfigErrors(t *testing.T) {
	d := openDB(t, "sqlite")
	ok := queue.Periodic{Name: "n", Schedule: "@hourly", Message: report}
	for _, c := range []struct {
		ps    []queue.Periodic
		field string
	}{
		{[]queue.Periodic{{Schedule: "@hourly", Message: report}}, "Config.Periodic[0].Name"},
		{[]queue.Periodic{{Name: strings.Repeat("n", 201), Schedule: "@hourly", Message: report}}, "Config.Periodic[0].Name"},
		{[]queue.Periodic{ok, ok}, "Config.Periodic[1].Name"},
		{[]queue.Periodic{{Name: "n", Schedule: "@hourly"}}, "Config.Periodic[0].Message"},
		{[]queue.Periodic{{Name: "n", Schedule: "bogus", Message: report}}, "Config.Periodic[0].Schedule"},
		{[]queue.Periodic{{Name: "n", Schedule: "", Message: report}}, "Config.Periodic[0].Schedule"},
		{[]queue.Periodic{{Name: "n", Schedule: "@every 10ms", Message: report}}, "Config.Periodic[0].Schedule"},
		{[]queue.Periodic{{Name: "n", Schedule: "@every soon", Message: report}}, "Config.Periodic[0].Schedule"},
		{[]queue.Periodic{{Name: "n", Schedule: "61 * * * *", Message: report}}, "Config.Periodic[0].Schedule"},
		{[]queue.Periodic{{Name: "n", Schedule: "* * * * * *", Message: report}}, "Config.Periodic[0].Schedule"},
		// robfig/cron panics on these.
		{[]queue.Periodic{{Name: "n", Schedule: "TZ=", Message: report}}, "Config.Periodic[0].Schedule"},
		{[]queue.Periodic{{Name: "n", Schedule: "CRON_TZ=", Message: report}}, "Config.Periodic[0].Schedule"},
		// February 30th never comes: Run would find it due at once, forever.
		{[]queue.Periodic{{Name: "n", Schedule: "0 0 30 2 *", Message: report}}, "Config.Periodic[0].Schedule"},
	} {
		_, err := queue.New(context.Background(), d.tx, queue.Config{Periodic: c.ps})
		var ie *idem.InputError
		if !errors.As(err, &ie) || ie.Field != c.field || ie.Fix == "" {
			t.Errorf("New with %+v: %v, want an InputError naming %s", c.ps, err, c.field)
		}
	}
	q := newQueue(t, d, queue.Config{})
	if _, err := q.EnqueueTick(context.Background(), queue.Periodic{Name: "n", Schedule: "nope", Message: report}, time.Now()); !isField(err, "Config.Periodic[0].Schedule") {
		t.Errorf("EnqueueTick of a bad schedule: %v", err)
	}
}

// FuzzSchedule: no Schedule makes parsing, or the next tick of what parsed,
// panic; a parsed schedule's next tick is after the time given, or none.
func FuzzSchedule(f *testing.F) {
	for _, s := range []string{"@every 30s", "*/5 * * * *", "@hourly", "@daily", "0 0 30 2 *", "@every 1500ms", "TZ=UTC 0 9 * * 1-5",
		"@every 2562047h", "@every -1s", "@every", "@", "* * * * * *", "0-59/0 * * * *", "CRON_TZ=Nowhere/Land * * * * *", "1,2-5/2 L * * *", "TZ=", "CRON_TZ="} {
		f.Add(s)
	}
	t0 := time.Date(2026, 11, 27, 7, 0, 1, 0, time.UTC)
	f.Fuzz(func(t *testing.T, spec string) {
		next, err := queue.ParseSchedule(spec)
		if err != nil {
			return
		}
		if n := next(t0); !n.IsZero() && !n.After(t0) {
			t.Errorf("%q: next tick after %v is %v", spec, t0, n)
		}
	})
}
