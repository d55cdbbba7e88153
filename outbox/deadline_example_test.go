package outbox_test

import (
	"fmt"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/outbox"
)

// A message that means nothing after a time (a reply its producer waits for, an
// offer that lapses) carries that time: an inbox refuses it after then.
func ExampleWithDeadline() {
	offer := idem.Message{Topic: "offers", Payload: []byte(`{"price":30}`)}
	m := outbox.WithDeadline(offer, time.Date(2026, 11, 26, 20, 30, 0, 0, time.UTC))
	// Enqueued in the business transaction: ob.EnqueueTx(ctx, tx, m)
	fmt.Println(idem.HeaderDeadline+":", m.Headers[idem.HeaderDeadline])
	// Output:
	// Idem-Deadline: 2026-11-26T20:30:00Z
}
