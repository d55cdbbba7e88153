package idem

import (
	"fmt"
	"unicode"
	"unicode/utf8"
)

// MaxKeyLen is the longest Scope or ID, in bytes, that a Key may have. It matches the
// 255-character limit of the HTTP Idempotency-Key header; longer identities should be
// hashed into an intent key first.
const MaxKeyLen = 255

// Key identifies one effect. Scope separates independent key spaces: a tenant, an
// authenticated principal, or a consumer group. The same ID in two scopes names two
// unrelated effects, so one tenant can never receive another tenant's stored result.
type Key struct {
	Scope string
	ID    string
}

// String returns the key as scope/id, for logs and error messages.
func (k Key) String() string { return k.Scope + "/" + k.ID }

// Validate reports whether k can be stored: Scope and ID must each be 1 to MaxKeyLen
// bytes of valid UTF-8 without control characters. The error is an *InputError naming
// the field.
func (k Key) Validate() error {
	if err := validatePart("Key.Scope", k.Scope); err != nil {
		return err
	}
	return validatePart("Key.ID", k.ID)
}

func validatePart(field, s string) error {
	switch {
	case s == "":
		return &InputError{Field: field, Reason: "is empty", Fix: "set it (" + fixFor(field) + ")"}
	case len(s) > MaxKeyLen:
		return &InputError{Field: field, Reason: fmt.Sprintf("is longer than %d bytes (got %d)", MaxKeyLen, len(s)),
			Fix: "shorten it, or hash the identity into a fixed-size intent key"}
	case !utf8.ValidString(s):
		return &InputError{Field: field, Reason: "is not valid UTF-8", Fix: "encode binary identities as hex or base64"}
	}
	for i, r := range s {
		if unicode.IsControl(r) {
			return &InputError{Field: field, Reason: fmt.Sprintf("has a control character %U at byte %d", r, i),
				Fix: "use printable characters only"}
		}
	}
	return nil
}

func fixFor(field string) string {
	if field == "Key.Scope" {
		return "a tenant, principal or consumer name"
	}
	return "the idempotency key of the request or message"
}
