package idemkey

import (
	"fmt"
	"strings"

	"github.com/idemhq/idem"
)

// Scope joins parts, such as a tenant and an operation, into one idem.Key.Scope:
// Scope("acme", "refund") is "acme:refund". Each part has '%' escaped as %25 and ':'
// as %3A first, so the result is unambiguous: Scope("a:b", "c") and Scope("a", "b:c")
// differ, and a tenant named "acme:refund" cannot read the scope of tenant "acme".
//
// Scope does not validate: the caller's idem.Key.Validate checks length and
// characters. Scope() and Scope("") are both "", which SplitScope reads as [""].
func Scope(parts ...string) string {
	var b strings.Builder
	n := len(parts)
	for _, p := range parts {
		n += len(p)
	}
	b.Grow(n)
	for i, p := range parts {
		if i > 0 {
			b.WriteByte(':')
		}
		for j := 0; j < len(p); j++ {
			switch c := p[j]; c {
			case '%':
				b.WriteString("%25")
			case ':':
				b.WriteString("%3A")
			default:
				b.WriteByte(c)
			}
		}
	}
	return b.String()
}

// SplitScope returns the parts Scope joined into s. It accepts exactly what Scope
// produces, so that one list of parts has one scope: any '%' not starting %25 or %3A
// (upper case) is an *idem.InputError for the field "scope".
func SplitScope(s string) ([]string, error) {
	parts := strings.Split(s, ":")
	off := 0
	for i, p := range parts {
		if strings.IndexByte(p, '%') >= 0 {
			u, err := unescape(p, off)
			if err != nil {
				return nil, err
			}
			parts[i] = u
		}
		off += len(p) + 1
	}
	return parts, nil
}

// unescape decodes one part that starts at byte off of the whole scope.
func unescape(p string, off int) (string, error) {
	var b strings.Builder
	b.Grow(len(p))
	for j := 0; j < len(p); j++ {
		if p[j] != '%' {
			b.WriteByte(p[j])
			continue
		}
		switch esc := p[j:min(j+3, len(p))]; esc {
		case "%25":
			b.WriteByte('%')
		case "%3A":
			b.WriteByte(':')
		default:
			return "", &idem.InputError{Field: "scope",
				Reason: fmt.Sprintf("has a malformed escape %q at byte %d", esc, off+j),
				Fix:    "build scopes with idemkey.Scope, which writes '%' as %25 and ':' as %3A"}
		}
		j += 2
	}
	return b.String(), nil
}
