package queue_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/idemsqlite"
	"github.com/idemhq/idem/inbox"
	"github.com/idemhq/idem/queue"
)

// An order and the message to ship it commit together; a consumer on the same
// database applies the message once, retiring it in the transaction of its
// effect.
func Example() {
	dir, _ := os.MkdirTemp("", "queue-example")
	defer os.RemoveAll(dir)
	ctx := context.Background()
	store, err := idemsqlite.Open(ctx, filepath.Join(dir, "shop.db"), idemsqlite.Config{})
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	db := store.DB()
	db.Exec("CREATE TABLE orders (id TEXT PRIMARY KEY, status TEXT)")
	txdb, _ := idemsql.SQLDB(ctx, db)
	q, err := queue.New(ctx, txdb, queue.Config{})
	if err != nil {
		log.Fatal(err)
	}

	// The business transaction: the order and its message, or neither.
	err = txdb.InTx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, "INSERT INTO orders VALUES ('order-1', 'paid')"); err != nil {
			return err
		}
		_, err := q.EnqueueTx(ctx, tx, idem.Message{ID: "ship-order-1", Topic: "shipping", Payload: []byte("order-1")})
		return err
	})
	if err != nil {
		log.Fatal(err)
	}

	// The consumer: its effect and the message's retirement commit together.
	src, err := q.Source(queue.SourceConfig{Topic: "shipping"})
	if err != nil {
		log.Fatal(err)
	}
	defer src.Close()
	shipped := make(chan string, 1)
	consumer, err := inbox.New(ctx, src, txdb, store, func(ctx context.Context, tx *sql.Tx, m idem.Message) error {
		_, err := tx.ExecContext(ctx, "UPDATE orders SET status = 'shipped' WHERE id = $1", string(m.Payload))
		shipped <- m.ID
		return err
	}, inbox.Config{Consumer: "shipping", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		log.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { consumer.Run(runCtx); close(done) }()
	fmt.Println("handled:", <-shipped)
	for {
		var outcome string
		db.QueryRow("SELECT outcome FROM idem_queue WHERE msg_id = 'ship-order-1'").Scan(&outcome)
		if outcome != "" {
			fmt.Println("message:", outcome)
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	stop()
	<-done
	var status string
	db.QueryRow("SELECT status FROM orders WHERE id = 'order-1'").Scan(&status)
	fmt.Println("order-1:", status)
	// Output:
	// handled: ship-order-1
	// message: applied
	// order-1: shipped
}

// A message of the same topic and ID as one still in the queue is not written
// again: InsertTx says it was a duplicate. A Job may also wait for its RunAt.
func ExampleQueue_InsertTx() {
	dir, _ := os.MkdirTemp("", "queue-example")
	defer os.RemoveAll(dir)
	ctx := context.Background()
	store, err := idemsqlite.Open(ctx, filepath.Join(dir, "app.db"), idemsqlite.Config{})
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	txdb, _ := idemsql.SQLDB(ctx, store.DB())
	q, err := queue.New(ctx, txdb, queue.Config{})
	if err != nil {
		log.Fatal(err)
	}

	welcome := idem.Message{ID: "welcome-42", Topic: "email", Payload: []byte("user 42")}
	for range 2 {
		err := txdb.InTx(ctx, func(tx *sql.Tx) error {
			res, err := q.InsertTx(ctx, tx, queue.Job{Message: welcome, RunAt: time.Now().Add(time.Hour)})
			fmt.Printf("%+v\n", res)
			return err
		})
		if err != nil {
			log.Fatal(err)
		}
	}
	// Output:
	// [{ID:welcome-42 Duplicate:false}]
	// [{ID:welcome-42 Duplicate:true}]
}

// EnqueueTick enqueues a periodic schedule's message of one tick once, however
// many processes try it: Run calls it at each tick of Config.Periodic.
func ExampleQueue_EnqueueTick() {
	dir, _ := os.MkdirTemp("", "queue-example")
	defer os.RemoveAll(dir)
	ctx := context.Background()
	store, err := idemsqlite.Open(ctx, filepath.Join(dir, "app.db"), idemsqlite.Config{})
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	txdb, _ := idemsql.SQLDB(ctx, store.DB())
	nightly := queue.Periodic{
		Name:     "nightly-report",
		Schedule: "0 2 * * *", // 02:00 UTC
		Message: func(tick time.Time) idem.Message {
			return idem.Message{Topic: "reports", Payload: []byte(tick.Format(time.DateOnly))}
		},
	}
	q, err := queue.New(ctx, txdb, queue.Config{Periodic: []queue.Periodic{nightly}})
	if err != nil {
		log.Fatal(err)
	}

	tick := time.Date(2026, 11, 27, 2, 0, 0, 0, time.UTC)
	res, err := q.EnqueueTick(ctx, nightly, tick)
	fmt.Println(res.ID, err)
	_, err = q.EnqueueTick(ctx, nightly, tick) // another process, the same tick
	fmt.Println(errors.Is(err, queue.ErrTickTaken))
	// Output:
	// periodic:nightly-report:1795744800000 <nil>
	// true
}

// Cancel finishes a message that has not run: it never will. A message that is
// not in the queue unfinished is ErrNotUnfinished, an idem.ErrNotFound.
func ExampleQueue_Cancel() {
	dir, _ := os.MkdirTemp("", "queue-example")
	defer os.RemoveAll(dir)
	ctx := context.Background()
	store, err := idemsqlite.Open(ctx, filepath.Join(dir, "app.db"), idemsqlite.Config{})
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	txdb, _ := idemsql.SQLDB(ctx, store.DB())
	q, err := queue.New(ctx, txdb, queue.Config{})
	if err != nil {
		log.Fatal(err)
	}
	reminder := idem.Message{ID: "remind-cart-7", Topic: "email", Payload: []byte("cart 7")}
	err = txdb.InTx(ctx, func(tx *sql.Tx) error {
		_, err := q.InsertTx(ctx, tx, queue.Job{Message: reminder, RunAt: time.Now().Add(24 * time.Hour)})
		return err
	})
	if err != nil {
		log.Fatal(err)
	}

	fmt.Println(q.Cancel(ctx, "email", "remind-cart-7", "the customer checked out"))
	err = q.Cancel(ctx, "email", "remind-cart-7", "again")
	fmt.Println(errors.Is(err, queue.ErrNotUnfinished), errors.Is(err, idem.ErrNotFound))
	// Output:
	// <nil>
	// true true
}
