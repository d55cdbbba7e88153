package idemkey_test

import (
	"errors"
	"fmt"
	"time"

	"github.com/idemhq/idem/idemkey"
)

// Two tabs that submit the same checkout get the same key without talking to each
// other; a second order of the same cart, clicked later, gets its own key.
func ExampleIntent() {
	checkout := idemkey.NewNamespace("checkout")

	tab1 := idemkey.Intent(checkout, "cart-7", "2026-03-14T15:09:26.535Z")
	tab2 := idemkey.Intent(checkout, "cart-7", "2026-03-14T15:09:26.535Z")
	reorder := idemkey.Intent(checkout, "cart-7", "2026-03-14T15:42:01.002Z")

	fmt.Println(tab1)
	fmt.Println(tab1 == tab2, tab1 == reorder)
	// Output:
	// 81fbbf48-76f6-548c-bc43-5800ffd91c9e
	// true false
}

// A consumer handling one message calls a payment API and then a mail API. Each call
// gets its own key, and a redelivery of the message derives the very same keys, so
// the providers deduplicate the retried calls.
func ExampleDerive() {
	msgKey := "0190a6e4-2b1c-7d3e-8f4a-5b6c7d8e9f0a"

	charge := idemkey.Derive(msgKey, "charge")
	receipt := idemkey.Derive(msgKey, "receipt")
	fmt.Println("Idempotency-Key:", charge)
	fmt.Println("Idempotency-Key:", receipt)
	fmt.Println(idemkey.Derive(msgKey, "charge") == charge, idemkey.ValidateHeader(charge))
	// Output:
	// Idempotency-Key: 63095b84-5d50-55b6-a492-5dd3ced179ae
	// Idempotency-Key: 2ee2b88d-5881-5c56-8f92-6a3b8f385454
	// true <nil>
}

// Scope escapes the separator, so a tenant name containing ':' cannot pose as another
// tenant's scope.
func ExampleScope() {
	fmt.Println(idemkey.Scope("acme", "refund"))
	fmt.Println(idemkey.Scope("acme:refund", "create"))

	parts, err := idemkey.SplitScope("acme%3Arefund:create")
	fmt.Printf("%q %v\n", parts, err)
	// Output:
	// acme:refund
	// acme%3Arefund:create
	// ["acme:refund" "create"] <nil>
}

// A consumer that keeps records for 24 hours rejects a UUIDv7 key made 26 hours ago
// instead of running it again: its record may be gone.
func ExampleCheckFresh() {
	key := "019ce6a3-7d00-7a1b-8c2d-3e4f5a6b7c8d" // made 2026-03-13 10:00 UTC
	now := time.Date(2026, 3, 14, 12, 0, 0, 0, time.UTC)

	t, _ := idemkey.Time(key)
	fmt.Println(t)
	fmt.Println(idemkey.CheckFresh(key, 48*time.Hour, now))

	err := idemkey.CheckFresh(key, 24*time.Hour, now)
	fmt.Println(errors.Is(err, idemkey.ErrStale))
	fmt.Println(err)
	// Output:
	// 2026-03-13 10:00:00 +0000 UTC
	// <nil>
	// true
	// idemkey: key 019ce6a3-7d00-7a1b-8c2d-3e4f5a6b7c8d is 26h0m0s old, older than the 24h0m0s retention window: it may have been processed and forgotten; reject it or raise the window
}
