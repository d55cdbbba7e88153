package outbox

import "time"

// SetClock makes o (and its relays) read the time from now, for tests that
// need a known age.
func SetClock[Tx any](o *Outbox[Tx], now func() time.Time) { o.now = now }

// SetMinPoll sets r's shortest poll wait (MinPollInterval): a long one leaves the
// rounds to the wakes.
func SetMinPoll[Tx any](r *Relay[Tx], d time.Duration) { r.minPoll = d }
