package idemkey

import (
	"errors"
	"fmt"
	"time"
)

var (
	// ErrStale is matched by every *StaleError (errors.Is(err, ErrStale)): the key is
	// older than the consumer's retention window.
	ErrStale = errors.New("idemkey: key is older than the retention window")

	// ErrFuture is matched by every *FutureError (errors.Is(err, ErrFuture)): the key
	// is dated further ahead of the consumer's clock than MaxSkew.
	ErrFuture = errors.New("idemkey: key is dated in the future beyond the allowed clock skew")
)

// StaleError reports a time-based key older than the retention window. Its record, if
// the key was ever processed, may already be forgotten, so processing it could repeat
// the effect: the consumer rejects it (dead letter, HTTP 422) instead.
type StaleError struct {
	Key    string
	Time   time.Time     // the time the key carries
	Age    time.Duration // now minus Time
	Window time.Duration // the retention window it was checked against
}

func (e *StaleError) Error() string {
	return fmt.Sprintf("idemkey: key %s is %v old, older than the %v retention window: "+
		"it may have been processed and forgotten; reject it or raise the window", e.Key, e.Age, e.Window)
}

// Is makes errors.Is(err, ErrStale) true for every StaleError.
func (e *StaleError) Is(target error) bool { return target == ErrStale }

// FutureError reports a time-based key dated more than MaxSkew ahead of the
// consumer's clock. Accepting it would break the window: it would stay fresh for
// longer than its record is kept, so a retry after the record expired would be
// processed again.
type FutureError struct {
	Key   string
	Time  time.Time     // the time the key carries
	Ahead time.Duration // Time minus now
}

func (e *FutureError) Error() string {
	return fmt.Sprintf("idemkey: key %s is dated %v ahead of now, more than the %v allowed clock skew: "+
		"the producer's clock is wrong; reject it and fix that clock", e.Key, e.Ahead, MaxSkew)
}

// Is makes errors.Is(err, ErrFuture) true for every FutureError.
func (e *FutureError) Is(target error) bool { return target == ErrFuture }
