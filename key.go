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
	for i := 0; i < len(s); i++ {
		// Keys are nearly always ASCII: check those bytes directly (C0 controls and
		// DEL are exactly unicode.IsControl's ASCII range) and decode runes only from
		// the first non-ASCII byte on.
		if c := s[i]; c >= utf8.RuneSelf {
			return validateRunes(field, s, i)
		} else if c < 0x20 || c == 0x7f {
			return controlError(field, rune(c), i)
		}
	}
	return nil
}

func validateRunes(field, s string, from int) error {
	for i, r := range s[from:] {
		if unicode.IsControl(r) {
			return controlError(field, r, from+i)
		}
	}
	return nil
}

func controlError(field string, r rune, at int) error {
	return &InputError{Field: field, Reason: fmt.Sprintf("has a control character %U at byte %d", r, at),
		Fix: "use printable characters only"}
}

func fixFor(field string) string {
	if field == "Key.Scope" {
		return "a tenant, principal or consumer name"
	}
	return "the idempotency key of the request or message"
}

// ValidateKeyPart reports why s cannot be one part (the scope or the ID) of a
// Key, as an *InputError naming field, or nil. Backends check a scope given on
// its own (a listing's filter) with it.
func ValidateKeyPart(field, s string) error { return validatePart(field, s) }
