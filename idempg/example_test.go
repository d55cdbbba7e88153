package idempg_test

import (
	"context"
	"fmt"
	"log"
	"net/url"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idempg"
	"github.com/idemhq/idem/internal/testsvc"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The inbox pattern: the key and the business row commit in one transaction, so a
// redelivered message finds the key and applies nothing.
func Example() {
	ctx := context.Background()
	databaseURL, drop := exampleDatabase() // your DATABASE_URL
	defer drop()
	pool, err := pgxpool.New(ctx, databaseURL)
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	store, err := idempg.New(ctx, pool, idempg.Config{})
	if err != nil {
		log.Fatal(err)
	}
	if _, err := pool.Exec(ctx, "CREATE TABLE orders (id text PRIMARY KEY)"); err != nil {
		log.Fatal(err)
	}

	handle := func(messageID, orderID string) {
		key := idem.Key{Scope: "orders-consumer", ID: messageID}
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			res, err := store.ClaimTx(ctx, tx, idem.Claim{Key: key})
			if err != nil {
				return err
			}
			if res.Outcome != idem.Acquired {
				fmt.Printf("%s: %s %q\n", messageID, res.Outcome, res.Record.Result)
				return nil
			}
			if _, err := tx.Exec(ctx, "INSERT INTO orders (id) VALUES ($1)", orderID); err != nil {
				return err
			}
			fmt.Printf("%s: created %s\n", messageID, orderID)
			return store.CompleteTx(ctx, tx, key, res.Token, []byte("created "+orderID))
		})
		if err != nil {
			log.Fatal(err)
		}
	}
	handle("msg-1", "order-42")
	handle("msg-1", "order-42") // the broker redelivers

	var n int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM orders").Scan(&n); err != nil {
		log.Fatal(err)
	}
	fmt.Println("orders:", n)
	// Output:
	// msg-1: created order-42
	// msg-1: replayed "created order-42"
	// orders: 1
}

// exampleDatabase returns a connection string on a fresh schema and a func that
// drops it (examples have no t.Cleanup).
func exampleDatabase() (connString string, drop func()) {
	ctx := context.Background()
	base := testsvc.PostgresURL()
	u, err := url.Parse(base)
	if err != nil {
		log.Fatal(err)
	}
	schema := testsvc.UniqueName("idem_test_")
	exec := func(sql string) {
		conn, err := pgx.Connect(ctx, base)
		if err != nil {
			log.Fatal(err)
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, sql); err != nil {
			log.Fatal(err)
		}
	}
	exec("CREATE SCHEMA " + schema)
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String(), func() { exec("DROP SCHEMA " + schema + " CASCADE") }
}
