package queue_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/chaos"
	"github.com/idemhq/idem/inbox"
	"github.com/idemhq/idem/queue"
)

func inLedger(t testing.TB, d *database, id string) int {
	t.Helper()
	return d.count(t, "SELECT count(*) FROM ledger WHERE id = $1", id)
}

// TestRetriesThenDeadLetter: a failing handler's message is retried (its
// attempts grow), and after the inbox's MaxAttempts it is dead-lettered and its
// row finished "dead"; a Permanent error dead-letters at once; the messages
// behind each in its ordering key then run.
func TestRetriesThenDeadLetter(t *testing.T) {
	for _, kind := range kinds {
		t.Run(kind, func(t *testing.T) {
			d := openDB(t, kind)
			ledgerTable(t, d)
			q := newQueue(t, d, queue.Config{})
			enqueue(t, d, q, job("jobs", "bad", "k"), job("jobs", "after-bad", "k"), job("jobs", "perm", "k2"), job("jobs", "after-perm", "k2"))
			var mu sync.Mutex
			calls := map[string]int{}
			handle := func(ctx context.Context, tx *sql.Tx, m idem.Message) error {
				mu.Lock()
				calls[m.ID]++
				mu.Unlock()
				switch m.ID {
				case "bad":
					return errors.New("boom")
				case "perm":
					return inbox.Permanent(errors.New("refused"))
				}
				return writeLedger("c")(ctx, tx, m)
			}
			src := newSource(t, q, queue.SourceConfig{Topic: "jobs"})
			startInbox(t, d, src, handle, inbox.Config{MaxAttempts: 3, Backoff: func(int) time.Duration { return time.Millisecond }})
			eventually(t, "the messages behind the dead ones applied", func() bool {
				return inLedger(t, d, "after-bad") == 1 && inLedger(t, d, "after-perm") == 1
			})
			bad, perm := mustRow(t, d, "jobs", "bad"), mustRow(t, d, "jobs", "perm")
			if bad.outcome != "dead" || bad.attempts < 3 {
				t.Errorf("bad: %+v, want dead after 3 attempts", bad)
			}
			if perm.outcome != "dead" || perm.attempts != 1 {
				t.Errorf("perm: %+v, want dead at attempt 1", perm)
			}
			mu.Lock()
			if calls["bad"] < 2 || calls["perm"] != 1 {
				t.Errorf("handler calls %v: bad retried, perm once", calls)
			}
			mu.Unlock()
			for id, kind := range map[string]string{"bad": "", "perm": "permanent"} {
				var k string
				if err := d.db.QueryRow("SELECT kind FROM idem_dead_letters WHERE consumer = 'ledger' AND msg_id = $1", id).Scan(&k); err != nil {
					t.Errorf("dead letter of %s: %v", id, err)
				} else if kind != "" && k != kind {
					t.Errorf("dead letter of %s has kind %q, want %q", id, k, kind)
				}
			}
			if got := d.count(t, "SELECT count(*) FROM idem_queue WHERE finished_at IS NULL"); got != 0 {
				t.Errorf("%d unfinished rows", got)
			}
		})
	}
}

// TestUniqueness: a second InsertTx of an unfinished topic and ID is a
// duplicate and writes nothing, also within one call; once the message
// finished, the same ID is written again and its consumer's inbox drops it by
// its key (outcome duplicate).
func TestUniqueness(t *testing.T) {
	for _, kind := range kinds {
		t.Run(kind, func(t *testing.T) {
			d := openDB(t, kind)
			ledgerTable(t, d)
			q := newQueue(t, d, queue.Config{})
			res := enqueue(t, d, q, job("jobs", "a", ""), job("jobs", "b", ""), job("jobs", "a", ""), job("other", "a", ""))
			if want := []queue.Enqueued{{ID: "a"}, {ID: "b"}, {ID: "a", Duplicate: true}, {ID: "a"}}; !equalEnq(res, want) {
				t.Errorf("InsertTx: %+v, want %+v", res, want)
			}
			res = enqueue(t, d, q, job("jobs", "a", ""), job("jobs", "c", ""))
			if want := []queue.Enqueued{{ID: "a", Duplicate: true}, {ID: "c"}}; !equalEnq(res, want) {
				t.Errorf("InsertTx again: %+v, want %+v", res, want)
			}
			if n := d.count(t, "SELECT count(*) FROM idem_queue WHERE topic = 'jobs' AND msg_id = 'a'"); n != 1 {
				t.Errorf("%d rows of jobs/a, want 1", n)
			}
			// A message without an ID gets one, never a duplicate.
			res = enqueue(t, d, q, queue.Job{Message: idem.Message{Topic: "jobs"}}, queue.Job{Message: idem.Message{Topic: "jobs"}})
			if res[0].ID == "" || res[0].ID == res[1].ID || res[0].Duplicate || res[1].Duplicate {
				t.Errorf("InsertTx of messages without IDs: %+v", res)
			}
			src := newSource(t, q, queue.SourceConfig{Topic: "jobs"})
			startInbox(t, d, src, writeLedger("c"), inbox.Config{})
			eventually(t, "a applied", func() bool { return mustRow(t, d, "jobs", "a").outcome == "applied" })
			res = enqueue(t, d, q, job("jobs", "a", ""))
			if res[0].Duplicate {
				t.Errorf("InsertTx of a finished message's ID: %+v, want written", res[0])
			}
			eventually(t, "the second a dropped as a duplicate", func() bool {
				r := mustRow(t, d, "jobs", "a")
				return r.finished && r.outcome == "duplicate"
			})
			if n := inLedger(t, d, "a"); n != 1 {
				t.Errorf("a applied %d times, want 1", n)
			}
		})
	}
}

func equalEnq(a, b []queue.Enqueued) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestRunAt: a Job whose RunAt is ahead of the queue's clock is not delivered
// while a message enqueued after it is, and is once the clock reaches it.
func TestRunAt(t *testing.T) {
	for _, kind := range kinds {
		t.Run(kind, func(t *testing.T) {
			d := openDB(t, kind)
			ledgerTable(t, d)
			var clock chaos.Clock
			q := newQueue(t, d, queue.Config{Now: clock.Now})
			later := job("jobs", "later", "")
			later.RunAt = clock.Now().Add(time.Hour)
			enqueue(t, d, q, later)
			src := newSource(t, q, queue.SourceConfig{Topic: "jobs"})
			startInbox(t, d, src, writeLedger("c"), inbox.Config{})
			for i := range 3 { // each delivered message proves a claim passed over "later"
				id := "now-" + string(rune('a'+i))
				enqueue(t, d, q, job("jobs", id, ""))
				eventually(t, id+" applied", func() bool { return inLedger(t, d, id) == 1 })
			}
			if n := inLedger(t, d, "later"); n != 0 {
				t.Fatalf("the job to run in an hour ran now")
			}
			if r := mustRow(t, d, "jobs", "later"); r.attempts != 0 || r.finished {
				t.Fatalf("the job to run in an hour: %+v, want untouched", r)
			}
			clock.Jump(time.Hour)
			enqueue(t, d, q, job("jobs", "wake", "")) // wakes the Source at once
			eventually(t, "later applied once its time came", func() bool { return inLedger(t, d, "later") == 1 })
		})
	}
}

// TestCancel: a waiting message cancelled never runs; a running one cancelled
// while its handler is blocked cannot commit its effect (its transaction fails
// to retire it and rolls back; outcome cancelled); a Cancel of an unknown or
// finished message is ErrNotUnfinished, which matches idem.ErrNotFound. On
// SQLite the running message's transaction holds the database: the Cancel waits
// for it, finds the message applied, and says so.
func TestCancel(t *testing.T) {
	for _, kind := range kinds {
		t.Run(kind, func(t *testing.T) {
			ctx := context.Background()
			d := openDB(t, kind)
			ledgerTable(t, d)
			var clock chaos.Clock
			q := newQueue(t, d, queue.Config{Now: clock.Now})
			w := job("jobs", "waiting", "")
			w.RunAt = clock.Now().Add(time.Minute)
			enqueue(t, d, q, w, job("jobs", "running", "k"), job("jobs", "behind", "k"))
			if err := q.Cancel(ctx, "jobs", "waiting", "not needed"); err != nil {
				t.Fatal(err)
			}
			if r := mustRow(t, d, "jobs", "waiting"); r.outcome != "cancelled" || r.lastError != "not needed" {
				t.Errorf("waiting: %+v, want cancelled with the reason", r)
			}
			clock.Jump(time.Hour)

			entered, release := make(chan struct{}), make(chan struct{})
			var once sync.Once
			var returned atomic.Bool
			src := newSource(t, q, queue.SourceConfig{Topic: "jobs"})
			startInbox(t, d, src, func(ctx context.Context, tx *sql.Tx, m idem.Message) error {
				if m.ID == "running" {
					once.Do(func() { close(entered) })
					<-release
					defer returned.Store(true)
				}
				return writeLedger("c")(ctx, tx, m)
			}, inbox.Config{})
			<-entered
			cancelled := make(chan error, 1)
			go func() { cancelled <- q.Cancel(ctx, "jobs", "running", "stop it") }()
			if kind == "sqlite" {
				close(release)
				if err := <-cancelled; !errors.Is(err, queue.ErrNotUnfinished) {
					t.Errorf("Cancel of a message applied while it waited: %v, want ErrNotUnfinished", err)
				}
				eventually(t, "behind applied", func() bool { return inLedger(t, d, "behind") == 1 })
				if n := inLedger(t, d, "running"); n != 1 {
					t.Errorf("running applied %d times, want 1", n)
				}
			} else {
				if err := <-cancelled; err != nil {
					t.Fatalf("Cancel of a running message: %v", err)
				}
				close(release)
				eventually(t, "the running handler returns", returned.Load)
				eventually(t, "behind applied (the key is free once running is cancelled)", func() bool { return inLedger(t, d, "behind") == 1 })
				if r := mustRow(t, d, "jobs", "running"); r.outcome != "cancelled" || r.lastError != "stop it" {
					t.Errorf("running: %+v, want cancelled", r)
				}
				// The consumer processes one batch at a time: behind's ran after running's rolled back.
				if n := inLedger(t, d, "running"); n != 0 {
					t.Errorf("the cancelled message's effect committed (%d rows)", n)
				}
			}
			if n := inLedger(t, d, "waiting"); n != 0 {
				t.Errorf("the cancelled waiting message ran")
			}
			for _, id := range []string{"nobody", "waiting"} {
				err := q.Cancel(ctx, "jobs", id, "")
				if !errors.Is(err, queue.ErrNotUnfinished) || !errors.Is(err, idem.ErrNotFound) {
					t.Errorf("Cancel of %s: %v, want ErrNotUnfinished matching idem.ErrNotFound", id, err)
				}
			}
			for _, c := range [][2]string{{"", "x"}, {"jobs", ""}} {
				var ie *idem.InputError
				if err := q.Cancel(ctx, c[0], c[1], ""); !errors.As(err, &ie) || (c[0] == "" && ie.Field != "topic") || (c[1] == "" && ie.Field != "id") {
					t.Errorf("Cancel(%q, %q): %v, want an InputError naming the field", c[0], c[1], err)
				}
			}
		})
	}
}

// TestRetention: Run deletes finished rows older than Retention, and keeps
// newer finished rows and unfinished ones however old.
func TestRetention(t *testing.T) {
	for _, kind := range kinds {
		t.Run(kind, func(t *testing.T) {
			d := openDB(t, kind)
			var clock chaos.Clock
			q := newQueue(t, d, queue.Config{Now: clock.Now, Retention: time.Hour})
			enqueue(t, d, q, job("jobs", "old", ""), job("jobs", "new", ""), job("jobs", "old-unfinished", ""))
			now := clock.Now().UnixMilli()
			d.exec(t, "UPDATE idem_queue SET finished_at = $1, outcome = 'applied' WHERE msg_id = 'old'", now-2*time.Hour.Milliseconds())
			d.exec(t, "UPDATE idem_queue SET finished_at = $1, outcome = 'applied' WHERE msg_id = 'new'", now-30*time.Minute.Milliseconds())
			d.exec(t, "UPDATE idem_queue SET created_at = 0, available_at = $1 WHERE msg_id = 'old-unfinished'", now+time.Hour.Milliseconds())
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- q.Run(ctx) }()
			eventually(t, "the old row swept", func() bool { _, ok := rowOf(t, d, "jobs", "old"); return !ok })
			cancel()
			if err := <-done; !errors.Is(err, context.Canceled) {
				t.Errorf("Run: %v", err)
			}
			for _, id := range []string{"new", "old-unfinished"} {
				if _, ok := rowOf(t, d, "jobs", id); !ok {
					t.Errorf("%s swept", id)
				}
			}
		})
	}
}

// TestSourceConfigErrors: a bad SourceConfig is an InputError naming its field.
func TestSourceConfigErrors(t *testing.T) {
	d := openDB(t, "sqlite")
	q := newQueue(t, d, queue.Config{})
	for _, c := range []struct {
		cfg   queue.SourceConfig
		field string
	}{
		{queue.SourceConfig{}, "SourceConfig.Topic"},
		{queue.SourceConfig{Topic: strings.Repeat("t", 300)}, "SourceConfig.Topic"},
		{queue.SourceConfig{Topic: "t", Lease: time.Millisecond}, "SourceConfig.Lease"},
		{queue.SourceConfig{Topic: "t", PollInterval: -1}, "SourceConfig.PollInterval"},
		{queue.SourceConfig{Topic: "t", PollInterval: time.Millisecond, MinPollInterval: time.Second}, "SourceConfig.PollInterval"},
		{queue.SourceConfig{Topic: "t", Worker: strings.Repeat("w", 256)}, "SourceConfig.Worker"},
	} {
		s, err := q.Source(c.cfg)
		var ie *idem.InputError
		if !errors.As(err, &ie) || ie.Field != c.field || ie.Fix == "" {
			t.Errorf("Source(%+v): %v, want an InputError naming %s with a fix", c.cfg, err, c.field)
		}
		if s != nil {
			s.Close()
		}
	}
	if _, err := queue.New(context.Background(), d.tx, queue.Config{Retention: -time.Second}); !isField(err, "Config.Retention") {
		t.Errorf("New with a negative Retention: %v", err)
	}
}

func isField(err error, field string) bool {
	var ie *idem.InputError
	return errors.As(err, &ie) && ie.Field == field
}

// TestInsertTxBadInput: a job the table cannot hold is an InputError naming
// the field, on every database alike (MySQL's columns hold 255 bytes of topic
// and ordering key), and nothing of the call is written.
func TestInsertTxBadInput(t *testing.T) {
	for _, kind := range kinds {
		t.Run(kind, func(t *testing.T) {
			d := openDB(t, kind)
			q := newQueue(t, d, queue.Config{})
			long := strings.Repeat("x", 256)
			for _, c := range []struct {
				m     idem.Message
				field string
			}{
				{idem.Message{ID: "a"}, "Message.Topic"},
				{idem.Message{ID: "a", Topic: long}, "Message.Topic"},
				{idem.Message{ID: "a", Topic: "t", OrderingKey: long}, "Message.OrderingKey"},
				{idem.Message{ID: long, Topic: "t"}, "Message.ID"},
				{idem.Message{ID: "a", Topic: "t", Payload: make([]byte, idem.MaxPayload+1)}, "Message.Payload"},
			} {
				err := d.tx.InTx(context.Background(), func(tx *sql.Tx) error {
					_, err := q.InsertTx(context.Background(), tx, job("t", "fine", ""), queue.Job{Message: c.m})
					return err
				})
				if !isField(err, c.field) {
					t.Errorf("InsertTx of %.40v: %v, want an InputError naming %s", c.m, err, c.field)
				}
			}
			if n := d.count(t, "SELECT count(*) FROM idem_queue"); n != 0 {
				t.Errorf("%d rows written by failed calls", n)
			}
		})
	}
}
