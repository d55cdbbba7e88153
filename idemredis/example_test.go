package idemredis_test

import (
	"context"
	"fmt"
	"log"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemredis"
	"github.com/redis/go-redis/v9"
)

// A Redis store shared by every replica of a service: a redelivered message gets the
// stored result instead of running the effect again. (No Output: it needs a Redis.)
func Example() {
	client := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	defer client.Close()
	store, err := idemredis.New(client, idemredis.Config{Prefix: "billing-idem:"})
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	claim := idem.Claim{Key: idem.Key{Scope: "billing", ID: "invoice-2026-001"}}

	result, outcome, err := idem.Do(ctx, store, claim, func(context.Context) ([]byte, error) {
		return []byte("ch_123"), nil // charge the card
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(outcome, string(result))
}
