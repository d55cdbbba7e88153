package idemhttp

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"net/http"
	"net/textproto"
	"slices"
	"strings"
)

// CookieCredentialScope is CredentialScope with only the named cookies standing for
// the Cookie header: their values are hashed (each name with its values), the other
// cookies are not, so a retry whose analytics cookie changed stays in its scope. A
// request whose only credential is one Authorization header (none of the cookies)
// gets AuthorizationScope's scope, as with CredentialScope. No cookies is
// CredentialScope(headers...).
//
// A named cookie counts whatever its value: one that Go's cookie parser refuses
// (`sid={"user":"alice"}`, `sid=a"b`, `sid=ab\c`, `sid=été`), one in a header with
// more cookies than Go reads (3,000), or one whose name differs from a named one
// only in case, is a credential a lenient upstream may accept as a session. It is hashed as sent, so its request gets a scope of its
// own and never the "anonymous" scope of requests that carry no credential.
func CookieCredentialScope(cookies []string, headers ...string) func(*http.Request) (string, error) {
	if len(cookies) == 0 {
		return CredentialScope(headers...)
	}
	var names []string
	for _, n := range append(slices.Clone(alwaysCredentials), headers...) {
		if n = http.CanonicalHeaderKey(n); n != "Cookie" && !slices.Contains(names, n) {
			names = append(names, n)
		}
	}
	cookies = slices.Clone(cookies)
	return func(r *http.Request) (string, error) {
		b, found := sessionCookies(r.Header["Cookie"], cookies)
		if !found && len(r.Header["Authorization"]) == 1 && onlyCredential(r, names) {
			return AuthorizationScope(r)
		}
		h, ok := credentialHash(r, names)
		if !ok && !found {
			return "anonymous", nil
		}
		sum := sha256.Sum256(append(b, h...))
		return "cred:" + hex.EncodeToString(sum[:16]), nil
	}
}

// sessionCookies encodes the named cookies of the Cookie header lines: for each
// name, the values Go's parser reads (as Request.CookiesNamed returns them, so a
// scope is the one earlier versions gave), then, if any, a section of the cookie
// pairs that name a credential and that parser skips, each as sent. found reports
// whether there was any of either.
//
// The section starts with a zero byte, which the hex hash credentialHash appends
// after it never holds, so a request with unparsed credentials cannot hash like
// one without.
func sessionCookies(lines, names []string) (b []byte, found bool) {
	values := make([][]string, len(names))
	var raw []string
	for _, line := range lines {
		for part := range strings.SplitSeq(line, ";") {
			part = textproto.TrimString(part)
			name, val, _ := strings.Cut(part, "=")
			name = textproto.TrimString(name)
			i := slices.IndexFunc(names, func(n string) bool { return strings.EqualFold(n, name) })
			if i < 0 {
				continue
			}
			if v, ok := parsedCookieValue(val); ok && names[i] == name {
				values[i] = append(values[i], v)
			} else {
				raw = append(raw, part)
			}
		}
	}
	for i, name := range names {
		found = found || len(values[i]) > 0
		b = appendField(b, name)
		b = binary.AppendUvarint(b, uint64(len(values[i])))
		for _, v := range values[i] {
			b = appendField(b, v)
		}
	}
	if len(raw) > 0 {
		found = true
		b = append(b, 0)
		b = binary.AppendUvarint(b, uint64(len(raw)))
		for _, p := range raw {
			b = appendField(b, p)
		}
	}
	return b, found
}

// parsedCookieValue is the value Go's cookie parser reads from raw (its quotes
// stripped), and false where that parser skips the cookie.
func parsedCookieValue(raw string) (string, bool) {
	if len(raw) > 1 && raw[0] == '"' && raw[len(raw)-1] == '"' {
		raw = raw[1 : len(raw)-1]
	}
	for i := range len(raw) {
		if c := raw[i]; c < 0x20 || c >= 0x7f || c == '"' || c == ';' || c == '\\' {
			return "", false
		}
	}
	return raw, true
}
