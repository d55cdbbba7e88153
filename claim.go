package idem

import (
	"fmt"
	"time"
)

// Defaults applied by every Store to a Claim whose Lease or Retention is zero.
const (
	// DefaultLease is how long an in-progress claim is held before another claimant may
	// take it over. It should exceed the longest time the effect can take.
	DefaultLease = 30 * time.Second
	// DefaultRetention is how long a completed record is remembered: Stripe's window
	// for idempotency keys. A duplicate that arrives later is processed again.
	DefaultRetention = 24 * time.Hour
)

// Claim asks a Store for the right to perform the effect named by Key.
type Claim struct {
	// Key names the effect. Required.
	Key Key
	// Fingerprint is a hash of the intent (method, path and body of a request; the
	// payload of a message). A later claim of the same key with another fingerprint
	// gets Mismatch rather than the first request's result. Nil and empty are equal,
	// so callers that do not fingerprint simply leave it nil every time.
	Fingerprint []byte
	// Lease is how long the claim is held in progress before another claimant may take
	// it over. Zero means DefaultLease; negative is invalid.
	Lease time.Duration
	// Retention is how long the completed record is remembered. Zero means
	// DefaultRetention; negative is invalid.
	Retention time.Duration
}

// WithDefaults returns c with zero Lease and Retention replaced by the defaults.
func (c Claim) WithDefaults() Claim {
	if c.Lease == 0 {
		c.Lease = DefaultLease
	}
	if c.Retention == 0 {
		c.Retention = DefaultRetention
	}
	return c
}

// Validate reports whether c is well formed; the error is an *InputError naming the
// field. Stores call it before touching the backend, so bad input writes nothing.
func (c Claim) Validate() error {
	if err := c.Key.Validate(); err != nil {
		return err
	}
	if c.Lease < 0 {
		return &InputError{Field: "Claim.Lease", Reason: fmt.Sprintf("is negative (%s)", c.Lease),
			Fix: "use a positive duration, or zero for the default " + DefaultLease.String()}
	}
	if c.Retention < 0 {
		return &InputError{Field: "Claim.Retention", Reason: fmt.Sprintf("is negative (%s)", c.Retention),
			Fix: "use a positive duration, or zero for the default " + DefaultRetention.String()}
	}
	if len(c.Fingerprint) > MaxFingerprintLen {
		return &InputError{Field: "Claim.Fingerprint", Reason: fmt.Sprintf("is longer than %d bytes (got %d)", MaxFingerprintLen, len(c.Fingerprint)),
			Fix: "store a hash of the intent (e.g. SHA-256), not the intent itself"}
	}
	return nil
}

// MaxFingerprintLen bounds Claim.Fingerprint: it is meant to be a hash.
const MaxFingerprintLen = 64

// Outcome is a store's answer to a Claim. Duplicates are outcomes, not errors.
type Outcome uint8

// The outcomes of a claim.
const (
	// Acquired: the key was free (or its holder's lease ran out); the caller holds it.
	Acquired Outcome = iota + 1
	// Replayed: the key was completed; Result.Record carries the stored result.
	Replayed
	// InProgress: another holder has a live lease; retry after Result.Record.ExpiresAt.
	InProgress
	// Mismatch: the key was claimed with another fingerprint. The stored result is
	// not returned: another intent must not learn it.
	Mismatch
)

var outcomeNames = [...]string{"invalid", "acquired", "replayed", "in_progress", "mismatch"}

// String returns the outcome's name as used in metric labels: "acquired",
// "replayed", "in_progress" or "mismatch".
func (o Outcome) String() string {
	if int(o) < len(outcomeNames) {
		return outcomeNames[o]
	}
	return fmt.Sprintf("Outcome(%d)", uint8(o))
}

// Duplicate reports whether the outcome means the effect must not run now.
func (o Outcome) Duplicate() bool { return o == Replayed || o == InProgress || o == Mismatch }

// State is the state of a stored record.
type State uint8

// Record states.
const (
	StateInProgress State = iota + 1
	StateCompleted
)

func (s State) String() string {
	switch s {
	case StateInProgress:
		return "in_progress"
	case StateCompleted:
		return "completed"
	}
	return fmt.Sprintf("State(%d)", uint8(s))
}

// Record is what a store remembers about a key.
type Record struct {
	Key         Key
	State       State
	Fingerprint []byte
	// Token is the fencing token of the holder that created (or took over) the record.
	// It is zero in the Record of a claim Result: only the holder, who received it as
	// Result.Token, may know it (see storekit.Existing).
	Token uint64
	// Result is what Complete stored. Nil while in progress.
	Result []byte
	// CreatedAt is when the current holder claimed the key. Backends that keep compact
	// dedup-only records may leave it zero.
	CreatedAt time.Time
	// ExpiresAt is when the lease ends (in progress) or the retention ends (completed).
	ExpiresAt time.Time
}

// Result is the answer to a Claim.
type Result struct {
	Outcome Outcome
	// Token is the fencing token to pass to Complete or Release when Outcome is
	// Acquired; zero otherwise.
	Token uint64
	// Record is the existing record when Outcome is Replayed, InProgress or Mismatch.
	Record Record
}
