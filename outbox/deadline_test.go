package outbox_test

import (
	"context"
	"database/sql"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemmysql"
	"github.com/idemhq/idem/idemnats"
	"github.com/idemhq/idem/idempg"
	"github.com/idemhq/idem/idemsqlite"
	"github.com/idemhq/idem/inbox"
	"github.com/idemhq/idem/internal/testsvc"
	"github.com/idemhq/idem/outbox"
)

// TestDeadlineCrossesTheBroker: a message enqueued WithDeadline carries it through
// the relay and JetStream to the inbox, which applies the message whose deadline is
// ahead and refuses the one whose deadline passed (the relay publishes it all the
// same): acked, dead-lettered with kind "deadline", not applied. The caller's
// headers are left as they were.
func TestDeadlineCrossesTheBroker(t *testing.T) {
	t.Parallel()
	forEachDB(t, func(t *testing.T, e env) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		now := time.Now() // the consumer's clock, fixed from here on
		js, stream, subject, sink := natsSink(t)
		headers := map[string]string{"k": "v"}
		late := outbox.WithDeadline(idem.Message{ID: "late", Topic: subject, Headers: headers, Payload: []byte("late")}, now.Add(-time.Second))
		timely := outbox.WithDeadline(idem.Message{ID: "timely", Topic: subject, Headers: headers, Payload: []byte("timely")}, now.Add(time.Hour))
		if len(headers) != 1 || late.Headers["k"] != "v" || late.Headers[idem.HeaderDeadline] != idem.FormatDeadline(now.Add(-time.Second)) {
			t.Fatalf("WithDeadline: caller's headers %v, message's %v; want the caller's untouched and the message's with %s", headers, late.Headers, idem.HeaderDeadline)
		}
		err := e.tx.InTx(ctx, func(tx *sql.Tx) error { _, err := e.ob.EnqueueTx(ctx, tx, late, timely); return err })
		if err != nil {
			t.Fatal(err)
		}
		r, err := e.ob.Relay(sink, outbox.RelayConfig{})
		if err != nil {
			t.Fatal(err)
		}
		drainRelay(t, r)

		if _, err := e.db.ExecContext(ctx, "CREATE TABLE ledger (order_id VARCHAR(255) NOT NULL)"); err != nil {
			t.Fatal(err)
		}
		src, err := idemnats.NewSource(ctx, js, idemnats.SourceConfig{Stream: stream, Durable: "ledger"})
		if err != nil {
			t.Fatal(err)
		}
		defer src.Close()
		c, err := inbox.New(ctx, src, e.tx, sqlStore(t, e), func(ctx context.Context, tx *sql.Tx, m idem.Message) error {
			_, err := tx.ExecContext(ctx, "INSERT INTO ledger (order_id) VALUES ($1)", m.ID)
			return err
		}, inbox.Config{Consumer: "ledger", Logger: slog.New(slog.DiscardHandler), ReplayPollInterval: -1, Now: func() time.Time { return now }})
		if err != nil {
			t.Fatal(err)
		}
		runCtx, stop := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- c.Run(runCtx) }()
		var applied []string
		var letters []inbox.DeadLetter
		testsvc.Eventually(t, time.Minute, "the consumer to settle both messages", func() bool {
			applied = applied[:0]
			rows, err := e.db.QueryContext(ctx, "SELECT order_id FROM ledger")
			if err != nil {
				t.Fatal(err)
			}
			for rows.Next() {
				var id string
				rows.Scan(&id)
				applied = append(applied, id)
			}
			rows.Close()
			if letters, err = c.DeadLetters(ctx, 10); err != nil {
				t.Fatal(err)
			}
			return len(applied)+len(letters) >= 2
		})
		stop()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Fatalf("Run = %v", err)
		}
		if len(applied) != 1 || applied[0] != "timely" || len(letters) != 1 || letters[0].Message.ID != "late" || letters[0].Kind != inbox.RefusedDeadline {
			t.Fatalf("applied %v, dead letters %+v; want timely applied and late dead-lettered as %s", applied, letters, inbox.RefusedDeadline)
		}
		info, err := js.Consumer(ctx, stream, "ledger")
		if err != nil {
			t.Fatal(err)
		}
		if ci := info.CachedInfo(); ci.NumAckPending != 0 || ci.NumPending != 0 {
			t.Fatalf("JetStream consumer: %d unacked, %d pending; want both messages acked", ci.NumAckPending, ci.NumPending)
		}
	})
}

// sqlStore is the key store of e's database.
func sqlStore(t *testing.T, e env) idem.TxStore[*sql.Tx] {
	t.Helper()
	var store idem.TxStore[*sql.Tx]
	var err error
	switch e.name {
	case "postgres":
		store, err = idempg.NewSQL(context.Background(), e.db, idempg.Config{})
	case "mysql":
		store, err = idemmysql.New(context.Background(), e.db, idemmysql.Config{})
	default:
		store, err = idemsqlite.New(context.Background(), e.db, idemsqlite.Config{})
	}
	if err != nil {
		t.Fatal(err)
	}
	return store
}
