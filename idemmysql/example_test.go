package idemmysql_test

import (
	"context"
	"log"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemmysql"
)

// The key recorded in the business transaction: the order row and its key commit
// together, or neither does. (Not run by go test: it needs a server.)
func ExampleStore_ClaimTx() {
	ctx := context.Background()
	store, err := idemmysql.Open(ctx, "mysql://app:secret@127.0.0.1:3306/shop", idemmysql.Config{})
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	db := store.DB()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer tx.Rollback()
	k := idem.Key{Scope: "orders", ID: "request-7f3a"}
	res, err := store.ClaimTx(ctx, tx, idem.Claim{Key: k})
	if err != nil || res.Outcome != idem.Acquired {
		return // a duplicate (or an error): nothing to do
	}
	if _, err := tx.ExecContext(ctx, "INSERT INTO orders (id, total) VALUES (?, ?)", "o-1", 4200); err != nil {
		log.Fatal(err)
	}
	if err := store.CompleteTx(ctx, tx, k, res.Token, nil); err != nil {
		log.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		log.Fatal(err)
	}
}
