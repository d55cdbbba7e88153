package queue_test

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/inbox"
	"github.com/idemhq/idem/queue"
)

// TestManyConsumers: four Queues on one database (four processes), each with a
// Source and an inbox taking batches of 32, share one topic of 2,000 messages
// of 20 ordering keys: each is applied once, and each key's messages in the
// order of their rows' ids (checked inside each effect's transaction against
// the last one committed). Run it under -race.
func TestManyConsumers(t *testing.T) {
	for _, kind := range kinds {
		t.Run(kind, func(t *testing.T) {
			d := openDB(t, kind)
			ledgerTable(t, d)
			d.exec(t, "CREATE TABLE keyseq (k VARCHAR(10) PRIMARY KEY, last INTEGER NOT NULL)")
			const n, keys = 2000, 20
			for k := range keys {
				d.exec(t, "INSERT INTO keyseq (k, last) VALUES ($1, -1)", fmt.Sprint("k", k))
			}
			qs := make([]*queue.Queue[*sql.Tx], 4)
			for i := range qs {
				qs[i] = newQueue(t, d, queue.Config{})
			}
			for from := 0; from < n; from += 100 { // one producer: ids grow with i
				jobs := make([]queue.Job, 0, 100)
				for i := from; i < from+100; i++ {
					jobs = append(jobs, queue.Job{Message: idem.Message{ID: fmt.Sprintf("m%04d", i), Topic: "many",
						OrderingKey: fmt.Sprint("k", i%keys), Payload: []byte(fmt.Sprint(i))}})
				}
				enqueue(t, d, qs[from/100%4], jobs...)
			}
			var outOfOrder atomic.Int64
			handle := func(ctx context.Context, tx *sql.Tx, m idem.Message) error {
				var seq, last int
				fmt.Sscan(string(m.Payload), &seq)
				if err := tx.QueryRowContext(ctx, "SELECT last FROM keyseq WHERE k = $1", m.OrderingKey).Scan(&last); err != nil {
					return err
				}
				if last >= seq {
					outOfOrder.Add(1)
				}
				if _, err := tx.ExecContext(ctx, "UPDATE keyseq SET last = $1 WHERE k = $2", seq, m.OrderingKey); err != nil {
					return err
				}
				return writeLedger("c")(ctx, tx, m)
			}
			for i, q := range qs {
				src := newSource(t, q, queue.SourceConfig{Topic: "many", Worker: fmt.Sprint("w", i)})
				startInbox(t, d, src, handle, inbox.Config{BatchSize: 32})
			}
			progress(t, "every row finished", n, func() int {
				if outOfOrder.Load() > 0 {
					t.Fatalf("%d messages applied after a later one of their key", outOfOrder.Load())
				}
				return n - d.count(t, "SELECT count(*) FROM idem_queue WHERE finished_at IS NULL")
			})
			if got := d.count(t, "SELECT count(*) FROM ledger"); got != n {
				t.Errorf("%d effects of %d messages", got, n)
			}
			if got := d.count(t, "SELECT count(DISTINCT id) FROM ledger"); got != n {
				t.Errorf("%d messages applied of %d", got, n)
			}
			if got := d.count(t, "SELECT count(*) FROM idem_queue WHERE outcome = 'applied'"); got != n {
				t.Errorf("%d rows applied of %d", got, n)
			}
			if got := outOfOrder.Load(); got != 0 {
				t.Errorf("%d messages applied after a later one of their key", got)
			}
		})
	}
}

// progress waits until done() reaches want, failing only when it stays the
// same for waitLong: a slow machine takes longer, a stalled queue fails.
func progress(t testing.TB, what string, want int, done func() int) {
	t.Helper()
	last, since := -1, time.Now()
	for {
		n := done()
		if n >= want {
			return
		}
		if n != last {
			last, since = n, time.Now()
		} else if time.Since(since) > waitLong {
			t.Fatalf("%s: stuck at %d of %d for %v", what, n, want, waitLong)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestConsumerInAnotherDatabase: a queue in one database consumed by an inbox
// in another (SQLite → PostgreSQL, PostgreSQL → MySQL) is at least once: each
// message applied once by its key, its row retired after the commit ("acked").
func TestConsumerInAnotherDatabase(t *testing.T) {
	for _, pair := range [][2]string{{"sqlite", "postgres"}, {"postgres", "mysql"}} {
		t.Run(pair[0]+"-to-"+pair[1], func(t *testing.T) {
			qd, id := openDB(t, pair[0]), openDB(t, pair[1])
			ledgerTable(t, id)
			q := newQueue(t, qd, queue.Config{})
			const n = 200
			var jobs []queue.Job
			for i := range n {
				jobs = append(jobs, job("far", fmt.Sprintf("m%03d", i), fmt.Sprint("k", i%5)))
			}
			enqueue(t, qd, q, jobs...)
			for i := range 2 {
				src := newSource(t, q, queue.SourceConfig{Topic: "far", Worker: fmt.Sprint("w", i)})
				startInbox(t, id, src, writeLedger("c"), inbox.Config{BatchSize: 16})
			}
			progress(t, "every row acked", n, func() int {
				return qd.count(t, "SELECT count(*) FROM idem_queue WHERE outcome = 'acked'")
			})
			if got := id.count(t, "SELECT count(DISTINCT id) FROM ledger"); got != n {
				t.Errorf("%d messages applied of %d", got, n)
			}
			if got := id.count(t, "SELECT count(*) FROM ledger"); got != n {
				t.Errorf("%d effects of %d messages: a key applied twice", got, n)
			}
		})
	}
}

// growOnServer makes a column of the row of msg_id 'huge' n bytes long, on the
// server: MariaDB's default max_allowed_packet refuses such a statement's
// arguments.
var growOnServer = map[string]string{
	"postgres": `UPDATE idem_queue SET payload = decode(repeat('x', $1), 'escape') WHERE msg_id = $2`,
	"mysql":    `UPDATE idem_queue SET payload = REPEAT('x', $1) WHERE msg_id = $2`,
	"sqlite":   `UPDATE idem_queue SET payload = zeroblob($1) WHERE msg_id = $2`,
}

var growHeaders = map[string]string{
	"postgres": `UPDATE idem_queue SET headers = repeat('0', $1) WHERE msg_id = $2`,
	"mysql":    `UPDATE idem_queue SET headers = REPEAT('0', $1) WHERE msg_id = $2`,
	"sqlite":   `UPDATE idem_queue SET headers = substr(hex(zeroblob($1)), 1, $1) WHERE msg_id = $2`,
}

// TestHostileRows: rows another service wrote by hand — headers that are not
// JSON, headers that are JSON but not strings, headers above the bound, a
// payload above idem.MaxPayload — are parked: finished "dead" with a reason
// naming the problem, never handed to the handler; the rows behind them, of
// the same ordering key too, are delivered; nothing stalls.
func TestHostileRows(t *testing.T) {
	for _, kind := range kinds {
		t.Run(kind, func(t *testing.T) {
			d := openDB(t, kind)
			ledgerTable(t, d)
			q := newQueue(t, d, queue.Config{})
			bad := map[string]string{ // msg_id → what its reason names
				"not-json":     "headers are not a JSON object",
				"not-strings":  "headers are not a JSON object",
				"huge-payload": "above idem.MaxPayload",
				"huge-headers": "headers are",
			}
			insert := func(id, key, headers string) {
				d.exec(t, `INSERT INTO idem_queue (msg_id, topic, ordering_key, headers, payload, created_at, available_at)
					VALUES ($1, 'hostile', $2, $3, $4, 0, 0)`, id, key, headers, []byte("p"))
			}
			insert("not-json", "k", "{not json")
			insert("not-strings", "k", `{"a": 1}`)
			insert("huge-payload", "k", "{}")
			insert("huge-headers", "k", "{}")
			insert("after", "k", "{}")
			insert("free", "", `{"x": "y"}`)
			d.exec(t, growOnServer[kind], idem.MaxPayload+1, "huge-payload")
			d.exec(t, growHeaders[kind], idemsql.OutboxMaxHeadersBytes+1, "huge-headers")
			var handled atomic.Int64
			var headerOK atomic.Bool
			src := newSource(t, q, queue.SourceConfig{Topic: "hostile"})
			startInbox(t, d, src, func(ctx context.Context, tx *sql.Tx, m idem.Message) error {
				handled.Add(1)
				if m.ID == "free" && m.Headers["x"] == "y" {
					headerOK.Store(true)
				}
				return writeLedger("c")(ctx, tx, m)
			}, inbox.Config{})
			eventually(t, "the rows behind the hostile ones applied", func() bool {
				return inLedger(t, d, "after") == 1 && inLedger(t, d, "free") == 1
			})
			eventually(t, "the hostile rows parked", func() bool {
				return d.count(t, "SELECT count(*) FROM idem_queue WHERE outcome = 'dead'") == len(bad)
			})
			for id, why := range bad {
				r := mustRow(t, d, "hostile", id)
				if !strings.Contains(r.lastError, why) {
					t.Errorf("%s parked with %q, want it to name %q", id, r.lastError, why)
				}
			}
			if handled.Load() != 2 || !headerOK.Load() {
				t.Errorf("handler called %d times (want 2: only the good rows), headers of free read: %v", handled.Load(), headerOK.Load())
			}
		})
	}
}
