package outbox_test

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/internal/testsvc"
	"github.com/idemhq/idem/outbox"
)

// TestEnqueueManyKeepsOrderAndContent: one, two and 1,201 messages (past the
// multi-row INSERT's 500 rows on SQLite and MySQL) enqueued in one transaction each
// are stored in the order given, with their topic, ordering key, headers and payload
// (an empty one included), and published in that order per ordering key.
func TestEnqueueManyKeepsOrderAndContent(t *testing.T) {
	t.Parallel()
	forEachDB(t, func(t *testing.T, e env) {
		ctx := context.Background()
		var want []idem.Message
		for _, n := range []int{1, 2, 1201} {
			msgs := make([]idem.Message, n)
			for i := range msgs {
				msgs[i] = idem.Message{ID: fmt.Sprintf("m%d-%05d", n, i), Topic: "orders", OrderingKey: fmt.Sprint("k", i%3),
					Headers: map[string]string{"i": fmt.Sprint(i)}, Payload: []byte(fmt.Sprint("p", i))}
			}
			msgs[n-1].Payload = nil
			tx, err := e.db.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			ids, err := e.ob.EnqueueTx(ctx, tx, msgs...)
			if err != nil {
				tx.Rollback()
				t.Fatal(err)
			}
			if len(ids) != n || ids[0] != msgs[0].ID || ids[n-1] != msgs[n-1].ID {
				t.Fatalf("EnqueueTx returned %d ids, want the %d given", len(ids), n)
			}
			if err := tx.Commit(); err != nil {
				t.Fatal(err)
			}
			want = append(want, msgs...)
		}
		rows, err := e.db.QueryContext(ctx, "SELECT msg_id, topic, ordering_key, headers, payload FROM idem_outbox ORDER BY id")
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		i := 0
		for ; rows.Next(); i++ {
			var id, topic, key, headers string
			var payload []byte
			if err := rows.Scan(&id, &topic, &key, &headers, &payload); err != nil {
				t.Fatal(err)
			}
			w := want[i]
			if id != w.ID || topic != w.Topic || key != w.OrderingKey || !bytes.Equal(payload, w.Payload) ||
				headers != fmt.Sprintf(`{"i":"%s"}`, w.Headers["i"]) {
				t.Fatalf("row %d = %s %s %s %s %q, want %s %s %s %v %q", i, id, topic, key, headers, payload,
					w.ID, w.Topic, w.OrderingKey, w.Headers, w.Payload)
			}
		}
		if err := rows.Err(); err != nil || i != len(want) {
			t.Fatalf("%d rows (err %v), want %d", i, err, len(want))
		}

		sink := &memSink{}
		r, err := e.ob.Relay(sink, outbox.RelayConfig{BatchSize: 100})
		if err != nil {
			t.Fatal(err)
		}
		drainRelay(t, r)
		order := map[string]int{}
		for i, m := range want {
			order[m.ID] = i
		}
		last := map[string]int{}
		for _, m := range sink.got {
			if prev, ok := last[m.OrderingKey]; ok && order[m.ID] <= prev {
				t.Fatalf("key %s: %s published after %s", m.OrderingKey, m.ID, want[prev].ID)
			}
			last[m.OrderingKey] = order[m.ID]
		}
		if len(sink.got) != len(want) {
			t.Fatalf("published %d, want %d", len(sink.got), len(want))
		}
	})
}

// TestEnqueueNotifies: on PostgreSQL the enqueue statement itself sends NOTIFY
// idem_outbox (no second round trip), delivered once at commit and not at all on
// rollback (NotifyEvery -1: every transaction); with the default, transactions
// within NotifyEvery of a notifying one do not notify.
func TestEnqueueNotifies(t *testing.T) {
	t.Parallel()
	// A database of its own: channels are per database, and other tests notify.
	dbURL := testsvc.PostgresDatabase(t)
	db, err := sql.Open("pgx", dbURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	ctx := context.Background()
	tdb, err := idemsql.SQLDB(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "LISTEN idem_outbox"); err != nil {
		t.Fatal(err)
	}
	// notifications counts what arrives before a marker committed after the
	// enqueues: notifications arrive in commit order.
	notifications := func() int {
		if _, err := db.ExecContext(ctx, "SELECT pg_notify('idem_outbox', 'end')"); err != nil {
			t.Fatal(err)
		}
		got := 0
		for {
			wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			n, err := conn.WaitForNotification(wctx)
			cancel()
			if err != nil {
				t.Fatalf("waiting for the marker: %v", err)
			}
			if n.Payload == "end" {
				return got
			}
			got++
		}
	}
	enqueue := func(ob *outbox.Outbox[*sql.Tx], commit bool, n int) {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		for range n {
			if _, err := ob.EnqueueTx(ctx, tx, idem.Message{Topic: "t"}); err != nil {
				t.Fatal(err)
			}
		}
		if commit {
			if err := tx.Commit(); err != nil {
				t.Fatal(err)
			}
		}
	}

	every, err := outbox.New(ctx, tdb, outbox.Config{NotifyEvery: -1})
	if err != nil {
		t.Fatal(err)
	}
	enqueue(every, false, 3)
	enqueue(every, true, 3) // three statements: NOTIFYs with one payload are folded at commit
	if got := notifications(); got != 1 {
		t.Fatalf("NotifyEvery -1: %d notifications, want 1: the committed transaction's", got)
	}

	debounced, err := outbox.New(ctx, tdb, outbox.Config{NotifyEvery: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	for range 5 {
		enqueue(debounced, true, 1)
	}
	if got := notifications(); got != 1 {
		t.Fatalf("NotifyEvery 1h: five transactions sent %d notifications, want 1", got)
	}
}
