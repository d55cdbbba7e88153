package outbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"log"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemnats"
	"github.com/idemhq/idem/idemnats/natsserver"
	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/idemsqlite"
	"github.com/idemhq/idem/inbox"
	"github.com/idemhq/idem/outbox"
)

// The whole message flow on the embedded defaults: an order and its event commit
// together (a rolled-back order publishes nothing), the relay publishes to an
// in-process NATS JetStream, and the inbox applies each event once to a ledger.
func Example() {
	dir, _ := os.MkdirTemp("", "outbox-example")
	defer os.RemoveAll(dir)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	srv, err := natsserver.StartServer(natsserver.ServerConfig{Dir: filepath.Join(dir, "nats")})
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Shutdown()
	nc, _ := srv.Connect()
	defer nc.Close()
	js, _ := jetstream.New(nc)
	idemnats.EnsureStream(ctx, js, idemnats.StreamConfig{Name: "ORDERS", Subjects: []string{"orders.>"}})

	store, err := idemsqlite.Open(ctx, filepath.Join(dir, "shop.db"), idemsqlite.Config{})
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	db := store.DB()
	db.Exec("CREATE TABLE orders (id TEXT PRIMARY KEY, total INTEGER)")
	db.Exec("CREATE TABLE ledger (order_id TEXT, total INTEGER)")
	txdb, _ := idemsql.SQLDB(ctx, db)
	ob, _ := outbox.New(ctx, txdb, outbox.Config{})

	place := func(id string, total int, commit bool) {
		tx, _ := db.BeginTx(ctx, nil)
		defer tx.Rollback()
		tx.ExecContext(ctx, "INSERT INTO orders VALUES ($1, $2)", id, total)
		ob.EnqueueTx(ctx, tx, idem.Message{ID: id, Topic: "orders.placed", Payload: []byte(fmt.Sprint(total))})
		if commit {
			tx.Commit()
		}
	}
	place("order-1", 30, true)
	place("order-2", 12, false) // rolled back: never published
	place("order-3", 8, true)

	sink, _ := idemnats.NewSink(js, idemnats.SinkConfig{})
	relay, _ := ob.Relay(sink, outbox.RelayConfig{Logger: slog.New(slog.DiscardHandler)})
	go relay.Run(ctx)

	src, _ := idemnats.NewSource(ctx, js, idemnats.SourceConfig{Stream: "ORDERS", Durable: "ledger"})
	defer src.Close()
	consumer, _ := inbox.New(ctx, src, txdb, store, func(ctx context.Context, tx *sql.Tx, m idem.Message) error {
		_, err := tx.ExecContext(ctx, "INSERT INTO ledger VALUES ($1, $2)", m.ID, string(m.Payload))
		return err
	}, inbox.Config{Consumer: "ledger"})
	go consumer.Run(ctx)

	var n, sum int
	for deadline := time.Now().Add(10 * time.Second); n < 2 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
		db.QueryRow("SELECT COUNT(*), COALESCE(SUM(total), 0) FROM ledger").Scan(&n, &sum)
	}
	fmt.Println("ledger entries:", n, "total:", sum)
	// Output:
	// ledger entries: 2 total: 38
}
