// Package keyset encodes the List cursors of the SQL and memory stores: the last id
// of a page, base64url so that it is opaque to callers and safe in a URL.
package keyset

import (
	"encoding/base64"
	"fmt"

	"github.com/idemhq/idem"
)

// maxLen is the longest cursor Encode makes: base64 of idem.MaxKeyLen bytes.
var maxLen = base64.RawURLEncoding.EncodedLen(idem.MaxKeyLen)

// Encode returns the cursor of the page after id.
func Encode(id string) string { return base64.RawURLEncoding.EncodeToString([]byte(id)) }

// Decode returns the id a cursor from Encode names, "" for the empty cursor. Anything
// else is an *idem.InputError on field "cursor".
func Decode(cursor string) (string, error) {
	if cursor == "" {
		return "", nil
	}
	if len(cursor) > maxLen {
		return "", Invalid(fmt.Sprintf("is longer than %d bytes (got %d)", maxLen, len(cursor)))
	}
	b, err := base64.RawURLEncoding.DecodeString(cursor)
	if err != nil {
		return "", Invalid("is not a cursor this store made")
	}
	id := string(b)
	if err := (idem.Key{Scope: "s", ID: id}).Validate(); err != nil {
		return "", Invalid("is not a cursor this store made")
	}
	return id, nil
}

// Invalid is the error of a cursor the store cannot have made.
func Invalid(reason string) error {
	return &idem.InputError{Field: "cursor", Reason: reason,
		Fix: `pass "" for the first page and then the KeyPage.Next of the page before, unchanged`}
}
