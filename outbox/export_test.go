package outbox

import "time"

// SetClock makes o (and its relays) read the time from now, for tests that
// need a known age.
func SetClock[Tx any](o *Outbox[Tx], now func() time.Time) { o.now = now }
