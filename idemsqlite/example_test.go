package idemsqlite_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemsqlite"
)

func Example() {
	dir, err := os.MkdirTemp("", "idemsqlite-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	store, err := idemsqlite.Open(context.Background(), filepath.Join(dir, "idem.db"), idemsqlite.Config{})
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()

	ctx := context.Background()
	charge := idem.Claim{Key: idem.Key{Scope: "shop", ID: "order-42/charge"}}
	for attempt := 1; attempt <= 2; attempt++ {
		result, outcome, err := idem.Do(ctx, store, charge, func(ctx context.Context) ([]byte, error) {
			return []byte("charged 10 EUR"), nil // the effect: runs once
		})
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("attempt %d: %s %q\n", attempt, outcome, result)
	}
	// Output:
	// attempt 1: acquired "charged 10 EUR"
	// attempt 2: replayed "charged 10 EUR"
}

// The claim, the business row and the completion commit in one transaction on the
// store's own database, so a crash leaves all of them or none.
func ExampleStore_ClaimTx() {
	dir, err := os.MkdirTemp("", "idemsqlite-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	store, err := idemsqlite.Open(context.Background(), filepath.Join(dir, "idem.db"), idemsqlite.Config{})
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	ctx := context.Background()
	db := store.DB()
	if _, err := db.ExecContext(ctx, "CREATE TABLE orders (id TEXT PRIMARY KEY)"); err != nil {
		log.Fatal(err)
	}

	consume := func(msgID, orderID string) idem.Outcome {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			log.Fatal(err)
		}
		defer tx.Rollback()
		key := idem.Key{Scope: "orders-consumer", ID: msgID}
		res, err := store.ClaimTx(ctx, tx, idem.Claim{Key: key})
		if err != nil || res.Outcome != idem.Acquired {
			return res.Outcome // a redelivery: acknowledge and do nothing
		}
		if _, err := tx.ExecContext(ctx, "INSERT INTO orders (id) VALUES (?)", orderID); err != nil {
			log.Fatal(err)
		}
		if err := store.CompleteTx(ctx, tx, key, res.Token, nil); err != nil {
			log.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			log.Fatal(err)
		}
		return res.Outcome
	}
	fmt.Println(consume("msg-1", "order-42"))
	fmt.Println(consume("msg-1", "order-42")) // the broker delivered it twice
	var n int
	_ = db.QueryRowContext(ctx, "SELECT COUNT(*) FROM orders").Scan(&n)
	fmt.Println("orders:", n)
	// Output:
	// acquired
	// replayed
	// orders: 1
}
