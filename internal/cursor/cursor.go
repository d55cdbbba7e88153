// Package cursor encodes the opaque cursors of keyset-paginated listings: the
// sort key of a page's last row, which the next page starts after.
package cursor

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/storekit"
)

// MaxLen bounds a cursor's length: a sort key is a few identifiers of at most 255
// bytes each, so anything longer was not made by Encode.
const MaxLen = 2048

// Encode returns the cursor of a row whose sort key is parts.
func Encode(parts ...string) string {
	enc := make([]string, len(parts))
	for i, p := range parts {
		enc[i] = base64.RawURLEncoding.EncodeToString([]byte(p))
	}
	return strings.Join(enc, ".")
}

// Decode returns the n parts of c, or an *idem.InputError on field "cursor" for
// anything Encode did not make. The empty cursor (the first page) gives nil.
//
// A part is compared with a text column, so it must be text that every database
// can hold: valid UTF-8 without NUL (PostgreSQL refuses either, and a refused
// cursor must be the caller's 400, not the backend's failure).
func Decode(c string, n int) ([]string, error) {
	if c == "" {
		return nil, nil
	}
	bad := Invalid
	if len(c) > MaxLen {
		return nil, bad(fmt.Sprintf("is %d bytes long, more than any cursor (%d)", len(c), MaxLen))
	}
	enc := strings.Split(c, ".")
	if len(enc) != n {
		return nil, bad("is not a cursor of this listing")
	}
	parts := make([]string, n)
	for i, e := range enc {
		b, err := base64.RawURLEncoding.DecodeString(e)
		if err != nil || !utf8.Valid(b) || bytes.IndexByte(b, 0) >= 0 {
			return nil, bad("is not a cursor of this listing")
		}
		parts[i] = string(b)
	}
	return parts, nil
}

// Limit checks a page size against idem.MaxListLimit.
func Limit(limit int) error {
	if limit <= 0 || limit > idem.MaxListLimit {
		return &idem.InputError{Field: "limit", Reason: fmt.Sprintf("is %d", limit), Fix: fmt.Sprintf("ask for 1 to %d rows a page", idem.MaxListLimit)}
	}
	return nil
}

// Invalid is the error of a cursor the listing cannot have made.
func Invalid(reason string) error {
	return &idem.InputError{Field: "cursor", Reason: reason, Fix: `pass back the cursor a previous page returned (its Next), unchanged, or "" for the first page`}
}

// EncodeID is the cursor of a store's List page that ends at id.
func EncodeID(id string) string { return Encode(id) }

// DecodeID returns the id a cursor from EncodeID names, "" for the empty cursor.
// Anything else, including an id no key can have, is an *idem.InputError on field
// "cursor".
func DecodeID(c string) (string, error) {
	parts, err := Decode(c, 1)
	if err != nil || parts == nil {
		return "", err
	}
	if err := (idem.Key{Scope: "s", ID: parts[0]}).Validate(); err != nil {
		return "", Invalid("is not a cursor this store made")
	}
	return parts[0], nil
}

// ListAfter begins an Inspector.List of the stores whose cursors are EncodeID's:
// it checks the call (storekit.CheckList) and returns the id its page starts
// after.
func ListAfter(ctx context.Context, scope, after string, limit int) (string, error) {
	if err := storekit.CheckList(ctx, scope, limit); err != nil {
		return "", err
	}
	return DecodeID(after)
}

// ScopesAfter begins a ScopeLister.Scopes of the stores whose cursors are
// EncodeScope's: it checks the call (storekit.CheckScopes) and returns the scope
// its page starts after.
func ScopesAfter(ctx context.Context, after string, limit int) (string, error) {
	if err := storekit.CheckScopes(ctx, limit); err != nil {
		return "", err
	}
	return DecodeScope(after)
}

// EncodeScope is the cursor of a store's Scopes page that ends at scope.
func EncodeScope(scope string) string { return Encode(scope) }

// DecodeScope returns the scope a cursor from EncodeScope names, "" for the empty
// cursor. Anything else, including a scope no key can have, is an *idem.InputError
// on field "cursor".
func DecodeScope(c string) (string, error) {
	parts, err := Decode(c, 1)
	if err != nil || parts == nil {
		return "", err
	}
	if err := (idem.Key{Scope: parts[0], ID: "i"}).Validate(); err != nil {
		return "", Invalid("is not a cursor this store made")
	}
	return parts[0], nil
}

// Trim ends a keyset page that was read with limit+1 rows: it keeps the first
// limit and, when the extra row shows another page follows, returns the cursor
// after the last kept one, Encode(sortKey(last)...); else "".
func Trim[T any](rows []T, limit int, sortKey func(T) []string) ([]T, string) {
	if len(rows) <= limit {
		return rows, ""
	}
	rows = rows[:limit]
	return rows, Encode(sortKey(rows[limit-1])...)
}

// Self is Trim's sort key of a page of plain strings (scopes): the string itself.
func Self(s string) []string { return []string{s} }

// RecordID is Trim's sort key of a page of a scope's records: the id (EncodeID).
func RecordID(r idem.Record) []string { return []string{r.Key.ID} }
