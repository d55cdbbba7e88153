package idemmem_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemmem"
)

// A webhook delivered twice: the first claim runs the effect and completes the
// key; the duplicate is answered Replayed with the stored result.
func ExampleStore() {
	store, err := idemmem.New(idemmem.Config{})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	claim := idem.Claim{Key: idem.Key{Scope: "webhooks", ID: "evt_1001"}}

	first, _ := store.Claim(ctx, claim)
	fmt.Println("first:", first.Outcome)
	// ... apply the event, then record what it produced.
	if err := store.Complete(ctx, claim.Key, first.Token, []byte("credited 42")); err != nil {
		panic(err)
	}

	dup, _ := store.Claim(ctx, claim)
	fmt.Println("duplicate:", dup.Outcome, string(dup.Record.Result))
	// Output:
	// first: acquired
	// duplicate: replayed credited 42
}

// With a small budget the store refuses claims of new keys with ErrFull, but
// still answers duplicates of keys it holds.
func ExampleConfig_maxBytes() {
	// 256 bytes: room for one claim in flight (about 192 bytes), not two.
	store, _ := idemmem.New(idemmem.Config{Shards: 1, MaxBytes: 256})
	ctx := context.Background()
	key := idem.Key{Scope: "orders", ID: "order-1"}

	first, _ := store.Claim(ctx, idem.Claim{Key: key})
	_ = store.Complete(ctx, key, first.Token, nil)

	_, err := store.Claim(ctx, idem.Claim{Key: idem.Key{Scope: "orders", ID: "order-2"}})
	fmt.Println("new key refused:", errors.Is(err, idemmem.ErrFull))
	var full *idemmem.FullError
	if errors.As(err, &full) {
		fmt.Println("budget:", full.MaxBytes)
	}

	dup, err := store.Claim(ctx, idem.Claim{Key: key})
	fmt.Println("duplicate:", dup.Outcome, err)
	// Output:
	// new key refused: true
	// budget: 256
	// duplicate: replayed <nil>
}
