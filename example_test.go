package idem_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemmem"
)

// Do runs an effect once per key: a redelivered message gets the stored result.
func ExampleDo() {
	store, _ := idemmem.New(idemmem.Config{})
	ctx := context.Background()
	claim := idem.Claim{Key: idem.Key{Scope: "billing", ID: "invoice-2026-001"}}

	charge := func(context.Context) ([]byte, error) {
		fmt.Println("charging the card")
		return []byte("ch_123"), nil
	}
	for range 3 { // the same message delivered three times
		result, outcome, err := idem.Do(ctx, store, claim, charge)
		fmt.Println(outcome, string(result), err)
	}
	// Output:
	// charging the card
	// acquired ch_123 <nil>
	// replayed ch_123 <nil>
	// replayed ch_123 <nil>
}

// A store answers a claim with an outcome; only failures are errors.
func ExampleStore() {
	store, _ := idemmem.New(idemmem.Config{})
	ctx := context.Background()
	key := idem.Key{Scope: "tenant-7", ID: "req-9f2c"}

	first, _ := store.Claim(ctx, idem.Claim{Key: key, Fingerprint: []byte("POST /orders {qty:1}")})
	second, _ := store.Claim(ctx, idem.Claim{Key: key, Fingerprint: []byte("POST /orders {qty:1}")})
	other, _ := store.Claim(ctx, idem.Claim{Key: key, Fingerprint: []byte("POST /orders {qty:5}")})
	fmt.Println(first.Outcome, second.Outcome, other.Outcome)

	_ = store.Complete(ctx, key, first.Token, []byte(`{"order":1}`))
	again, _ := store.Claim(ctx, idem.Claim{Key: key, Fingerprint: []byte("POST /orders {qty:1}")})
	fmt.Println(again.Outcome, string(again.Record.Result))

	err := store.Complete(ctx, key, first.Token+1, nil)
	fmt.Println(errors.Is(err, idem.ErrLeaseLost))
	// Output:
	// acquired in_progress mismatch
	// replayed {"order":1}
	// true
}

// Input errors name the field and the fix.
func ExampleKey_Validate() {
	err := idem.Key{Scope: "tenant-7"}.Validate()
	fmt.Println(err)
	// Output:
	// idem: Key.ID is empty: set it (the idempotency key of the request or message)
}
