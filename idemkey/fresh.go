package idemkey

import (
	"errors"
	"fmt"
	"time"

	"github.com/idemhq/idem"
)

// MaxSkew is how far ahead of the consumer's clock a key's time may be and still be
// accepted: clocks of producers and consumers differ a little even with NTP.
//
// A key dated up to MaxSkew ahead stays fresh for up to window + MaxSkew after it
// first arrives, so a consumer that rejects stale keys must keep each record for at
// least window + MaxSkew; otherwise a retry could outlive the record and run again.
const MaxSkew = time.Minute

// CheckFresh returns nil when a UUIDv7 or ULID key may be processed at now: its time
// is at most window before now and at most MaxSkew after it. Otherwise it returns
//
//   - a *StaleError (errors.Is(err, ErrStale)) when the key is older than window: the
//     consumer may have processed it and forgotten it, so it must reject it rather
//     than run it again;
//   - a *FutureError (errors.Is(err, ErrFuture)) when it is dated beyond MaxSkew;
//   - an *idem.InputError when the key is invalid or carries no time (see Time), or
//     window is not positive.
//
// A key exactly window old is still fresh.
func CheckFresh(key string, window time.Duration, now time.Time) error {
	if window <= 0 {
		return &idem.InputError{Field: "window", Reason: fmt.Sprintf("is not positive (got %v)", window),
			Fix: "pass the consumer's retention window, e.g. 24*time.Hour"}
	}
	t, err := Time(key)
	if err != nil {
		return err
	}
	// Compare times, not durations: now.Sub saturates for far-apart times.
	if t.Before(now.Add(-window)) {
		return &StaleError{Key: key, Time: t, Age: now.Sub(t), Window: window}
	}
	if t.After(now.Add(MaxSkew)) {
		return &FutureError{Key: key, Time: t, Ahead: t.Sub(now)}
	}
	return nil
}

// Stale reports whether a UUIDv7 or ULID key is older than window at now, so that a
// consumer rejects it with a clear outcome instead of processing it again after its
// record was forgotten. A key exactly window old is not stale.
//
// The error is non-nil when the key cannot be judged fresh: it carries no time or is
// invalid (*idem.InputError), or it is dated more than MaxSkew ahead of now
// (*FutureError): such a key is not stale, but accepting it would let it outlive its
// record. Use CheckFresh to get the stale case as an error too.
func Stale(key string, window time.Duration, now time.Time) (bool, error) {
	err := CheckFresh(key, window, now)
	if errors.Is(err, ErrStale) {
		return true, nil
	}
	return false, err
}
