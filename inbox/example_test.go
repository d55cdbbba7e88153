package inbox_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"log"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/idemsqlite"
	"github.com/idemhq/idem/inbox"
)

// A consumer applies each order once, however often the broker delivers it, and
// dead-letters the one it cannot decode instead of retrying it forever. (The broker
// here is the in-memory one of this package's tests; see idemnats, idemkafka,
// idemredis and idemamqp for real ones.)
func Example() {
	dir, _ := os.MkdirTemp("", "inbox-example")
	defer os.RemoveAll(dir)
	ctx := context.Background()
	store, err := idemsqlite.Open(ctx, filepath.Join(dir, "ledger.db"), idemsqlite.Config{})
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	db := store.DB()
	db.Exec("CREATE TABLE ledger (order_id TEXT, amount INTEGER)")
	txdb, _ := idemsql.SQLDB(ctx, db)

	broker := newFakeBroker()
	order := idem.Message{ID: "order-1", Topic: "orders", Payload: []byte(`{"amount": 30}`)}
	garbled := idem.Message{ID: "order-2", Topic: "orders", Payload: []byte(`{"amount":`)}
	broker.Publish(ctx, order, order, garbled, order) // delivered three times, and a bad one

	consumer, err := inbox.New(ctx, broker, txdb, store, func(ctx context.Context, tx *sql.Tx, m idem.Message) error {
		var o struct{ Amount int }
		if err := json.Unmarshal(m.Payload, &o); err != nil {
			return inbox.Permanent(fmt.Errorf("not an order: %w", err))
		}
		_, err := tx.ExecContext(ctx, "INSERT INTO ledger VALUES ($1, $2)", m.ID, o.Amount)
		return err
	}, inbox.Config{Consumer: "ledger", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		log.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	go consumer.Run(runCtx)
	broker.waitSettled(ctx)
	stop()

	var n, sum int
	db.QueryRow("SELECT COUNT(*), SUM(amount) FROM ledger").Scan(&n, &sum)
	fmt.Println("ledger entries:", n, "sum:", sum)
	dls, _ := consumer.DeadLetters(ctx, 10)
	for _, dl := range dls {
		fmt.Println("dead letter:", dl.Message.ID, dl.Kind)
	}
	// Output:
	// ledger entries: 1 sum: 30
	// dead letter: order-2 permanent
}

// A batch consumer writes the ledger rows of a batch's fresh messages in one
// statement. The duplicate is never passed to it; the undecodable order fails the
// batch's call, the batch runs again one message at a time, and that order alone
// is dead-lettered.
func ExampleNewBatch() {
	dir, _ := os.MkdirTemp("", "inbox-batch-example")
	defer os.RemoveAll(dir)
	ctx := context.Background()
	store, err := idemsqlite.Open(ctx, filepath.Join(dir, "ledger.db"), idemsqlite.Config{})
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	db := store.DB()
	db.Exec("CREATE TABLE ledger (order_id TEXT, amount INTEGER)")
	txdb, _ := idemsql.SQLDB(ctx, db)

	broker := newFakeBroker()
	broker.Publish(ctx,
		idem.Message{ID: "order-1", Payload: []byte(`{"amount": 30}`)},
		idem.Message{ID: "order-2", Payload: []byte(`{"amount": 12}`)},
		idem.Message{ID: "order-1", Payload: []byte(`{"amount": 30}`)}, // redelivered
		idem.Message{ID: "order-3", Payload: []byte(`{"amount":`)},
		idem.Message{ID: "order-4", Payload: []byte(`{"amount": 8}`)})

	var calls []int
	consumer, err := inbox.NewBatch(ctx, broker, txdb, store, func(ctx context.Context, tx *sql.Tx, ms []idem.Message) error {
		calls = append(calls, len(ms))
		query, args := "INSERT INTO ledger VALUES ", []any{}
		for i, m := range ms {
			var o struct{ Amount int }
			if err := json.Unmarshal(m.Payload, &o); err != nil {
				return inbox.Permanent(fmt.Errorf("%s is not an order: %w", m.ID, err))
			}
			if i > 0 {
				query += ", "
			}
			query += fmt.Sprintf("($%d, $%d)", 2*i+1, 2*i+2)
			args = append(args, m.ID, o.Amount)
		}
		_, err := tx.ExecContext(ctx, query, args...)
		return err
	}, inbox.Config{Consumer: "ledger", BatchSize: 64, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		log.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	go consumer.Run(runCtx)
	broker.waitSettled(ctx)
	stop()

	var n, sum int
	db.QueryRow("SELECT COUNT(*), SUM(amount) FROM ledger").Scan(&n, &sum)
	fmt.Println("handler calls, by messages:", calls)
	fmt.Println("ledger entries:", n, "sum:", sum)
	dls, _ := consumer.DeadLetters(ctx, 10)
	for _, dl := range dls {
		fmt.Println("dead letter:", dl.Message.ID, dl.Kind)
	}
	// Output:
	// handler calls, by messages: [4 1 1 1 1]
	// ledger entries: 3 sum: 50
	// dead letter: order-3 permanent
}
