package idemkey

import (
	"fmt"

	"github.com/idemhq/idem"
)

// MaxHeaderLen is the longest Idempotency-Key header value ValidateHeader accepts, in
// characters (bytes, since only ASCII is allowed). It equals idem.MaxKeyLen, so every
// valid header is also a valid idem.Key.ID, and matches the limit of Stripe's API.
const MaxHeaderLen = idem.MaxKeyLen

// Validate reports whether id can be used as the ID of an idem.Key: 1 to
// idem.MaxKeyLen bytes of valid UTF-8 without control characters. It applies the
// rules of idem.Key.Validate, so a key accepted here is accepted by every store; the
// error is an *idem.InputError for the field "key".
func Validate(id string) error {
	err := idem.Key{Scope: "x", ID: id}.Validate()
	if ie, ok := err.(*idem.InputError); ok { // not errors.As: it would allocate on every call
		return &idem.InputError{Field: "key", Reason: ie.Reason, Fix: ie.Fix}
	}
	return err
}

// ValidateHeader reports whether s is a usable value of the HTTP Idempotency-Key
// header (IETF draft-ietf-httpapi-idempotency-key-header): 1 to MaxHeaderLen
// characters of printable ASCII (0x20 to 0x7E), as an RFC 8941 String allows.
//
// It also refuses a leading or trailing space: HTTP strips spaces around a field
// value, so the server would see another key than the client meant. The error is an
// *idem.InputError for the field "Idempotency-Key" that names the problem and its fix.
func ValidateHeader(s string) error {
	const field = "Idempotency-Key"
	switch {
	case s == "":
		return &idem.InputError{Field: field, Reason: "is empty",
			Fix: "send one unique key per operation, e.g. idemkey.NewV7(), and the same key on every retry"}
	case len(s) > MaxHeaderLen:
		return &idem.InputError{Field: field,
			Reason: fmt.Sprintf("is longer than %d characters (got %d)", MaxHeaderLen, len(s)),
			Fix:    "send a shorter key; a UUID (36 characters) is enough, and idemkey.Intent hashes longer identities"}
	case s[0] == ' ' || s[len(s)-1] == ' ':
		return &idem.InputError{Field: field, Reason: "starts or ends with a space",
			Fix: "trim it: HTTP drops spaces around header values, so the server would see another key"}
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e {
			return &idem.InputError{Field: field,
				Reason: fmt.Sprintf("has byte 0x%02X at byte %d, which is not printable ASCII", c, i),
				Fix:    "use printable ASCII (0x20 to 0x7E) only, e.g. a UUID; hash other identities with idemkey.Intent"}
		}
	}
	return nil
}
