package idem

import (
	"context"
	"errors"
	"fmt"
)

var (
	// ErrLeaseLost is returned by Complete and Release when the caller's token no
	// longer holds the key: its lease ran out and another claimant took over, or the
	// record was released or expired. The caller's result was not recorded.
	ErrLeaseLost = errors.New("idem: lease lost: the key was taken over, released or expired; the result was not recorded")

	// ErrCompleted is returned by Release for a key that is already completed: a
	// recorded result cannot be taken back.
	ErrCompleted = errors.New("idem: key is already completed; a completed key cannot be released")

	// ErrInvalid is matched by every *InputError (errors.Is(err, ErrInvalid)).
	ErrInvalid = errors.New("idem: invalid input")

	// ErrClosed is returned by a store, source or sink used after its Close.
	ErrClosed = errors.New("idem: closed")
)

// InputError reports bad input: which field, what is wrong, and how to fix it.
// Nothing is written to the backend when a call fails with an InputError.
type InputError struct {
	Field  string // e.g. "Key.ID", "Claim.Lease", "token"
	Reason string // e.g. "is longer than 255 bytes (got 312)"
	Fix    string // e.g. "shorten it, or hash the identity into an intent key"
}

func (e *InputError) Error() string {
	msg := "idem: " + e.Field + " " + e.Reason
	if e.Fix != "" {
		msg += ": " + e.Fix
	}
	return msg
}

// Is makes errors.Is(err, ErrInvalid) true for every InputError.
func (e *InputError) Is(target error) bool { return target == ErrInvalid }

// BackendError wraps a failure of the backend (connection refused, timeout, server
// error) with the backend and operation that failed.
type BackendError struct {
	Backend string // "postgres", "redis", "sqlite", "memory"
	Op      string // "claim", "complete", "release", "sweep", "migrate"
	Err     error
}

func (e *BackendError) Error() string {
	return fmt.Sprintf("idem: %s %s: %v", e.Backend, e.Op, e.Err)
}

func (e *BackendError) Unwrap() error { return e.Err }

// IsRetryable reports whether err is a transient failure after which the same call
// may succeed: a backend error that is not the caller's cancellation. Input errors,
// ErrLeaseLost and ErrCompleted are final.
func IsRetryable(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, ErrInvalid) ||
		errors.Is(err, ErrLeaseLost) || errors.Is(err, ErrCompleted) || errors.Is(err, ErrClosed) {
		return false
	}
	var be *BackendError
	return errors.As(err, &be)
}

// PublishError is the error of a Sink's Publish that failed for part of its batch:
// Accepted[i] reports that the broker acknowledged msgs[i] as Publish returning nil
// acknowledges a whole batch (stored, where the sink's doc says so). A message not
// accepted may have reached the broker or not. The outbox relay marks the accepted
// messages published and sends only the others again, so a batch cut short does not
// turn into copies on a broker that keeps every copy (RabbitMQ, Pub/Sub, Kafka). A
// Sink that cannot tell which messages were accepted returns its error without this
// type, and the relay sends every message of the batch again.
type PublishError struct {
	Accepted []bool // one per message of the batch, in its order
	Err      error  // why the others were not accepted
}

func (e *PublishError) Error() string {
	n := 0
	for _, ok := range e.Accepted {
		if ok {
			n++
		}
	}
	return fmt.Sprintf("%v (%d of %d messages of the batch accepted)", e.Err, n, len(e.Accepted))
}

func (e *PublishError) Unwrap() error { return e.Err }

// PermanentError marks an error as final: retrying the same call will not help (a
// declined card, an undecodable payload). The inbox dead-letters such a message at
// once and the effect fence records such an effect as failed, instead of retrying.
// inbox.PermanentError and effect.PermanentError are this type, so a mark made with
// either package's Permanent is recognised by both.
type PermanentError struct{ Err error }

func (e *PermanentError) Error() string { return "permanent: " + e.Err.Error() }

func (e *PermanentError) Unwrap() error { return e.Err }

// Permanent marks err as final (see PermanentError). Permanent(nil) is nil, so
// `return idem.Permanent(err)` stays a success when err is nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &PermanentError{Err: err}
}

// IsPermanent reports whether err, or an error it wraps, was marked by Permanent.
func IsPermanent(err error) bool {
	var pe *PermanentError
	return errors.As(err, &pe)
}
