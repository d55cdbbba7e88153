package idemhttp_test

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"net/http"
	"strings"
	"testing"

	"github.com/idemhq/idem/idemhttp"
)

// cookieScopeV1 is CookieCredentialScope as it was before it read the cookies Go's
// parser refuses (with the default credential headers): the scope every request
// whose session cookies that parser reads must keep, so keys stored by earlier
// versions replay.
func cookieScopeV1(r *http.Request, name string) string {
	field := func(b []byte, s string) []byte { return append(binary.AppendUvarint(b, uint64(len(s))), s...) }
	var vs []string
	for _, c := range r.CookiesNamed(name) {
		vs = append(vs, c.Value)
	}
	b := binary.AppendUvarint(field(nil, name), uint64(len(vs)))
	for _, v := range vs {
		b = field(b, v)
	}
	var h []byte
	found := false
	for _, n := range []string{"Authorization", "Proxy-Authorization", "X-Api-Key"} {
		found = found || len(r.Header[n]) > 0
		h = binary.AppendUvarint(h, uint64(len(r.Header[n])))
		for _, v := range r.Header[n] {
			h = field(h, v)
		}
	}
	if !found && len(vs) == 0 {
		return "anonymous"
	}
	if found {
		sum := sha256.Sum256(h)
		b = append(b, hex.EncodeToString(sum[:16])...)
	}
	sum := sha256.Sum256(b)
	return "cred:" + hex.EncodeToString(sum[:16])
}

func cookieRequest(cookies ...string) *http.Request {
	r, _ := http.NewRequest("POST", "/", nil)
	for _, c := range cookies {
		r.Header.Add("Cookie", c)
	}
	return r
}

// A named cookie Go's parser skips is a credential all the same: each gets a
// scope of its own, never "anonymous" nor another's; cookies that parser reads
// keep the scope they had.
func TestCookieCredentialScopeUnparsedCookies(t *testing.T) {
	t.Parallel()
	scope := idemhttp.CookieCredentialScope([]string{"sid"}, idemhttp.DefaultCredentialHeaders...)
	get := func(cookies ...string) string {
		s, err := scope(cookieRequest(cookies...))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	anonymous := get("_ga=1")
	if anonymous != "anonymous" {
		t.Fatalf("no session cookie: scope %q, want anonymous", anonymous)
	}
	many := strings.Repeat("a=1; ", 3000) + "sid=alice"
	// Each cookie with the session it names: the same session, the same scope.
	sessions := map[string]string{}
	for _, c := range [][2]string{{`sid={"user":"alice"}`, "json"}, {`sid=a"b`, "quote"}, {`sid=ab\c`, "backslash"},
		{"sid=été", "été"}, {"_ga=1; sid=été; theme=dark", "été"}, {"sid=\x01", "control"}, {`sid="alice`, "open quote"},
		{"SID=alice", "SID"}, {"Sid=alice", "Sid"}, {many, "alice"}, {"sid=alice", "alice"}} {
		got := get(c[0])
		if got == "anonymous" {
			t.Errorf("Cookie %.40q: scope anonymous, the scope of requests without credentials", c[0])
		}
		if s, ok := sessions[got]; ok && s != c[1] {
			t.Errorf("Cookie %.40q shares the scope %s of session %q", c[0], got, s)
		}
		sessions[got] = c[1]
	}
	if len(sessions) != 9 {
		t.Errorf("%d scopes for 9 sessions: %v", len(sessions), sessions)
	}
	for _, c := range []string{"sid=alice", "sid=alice; theme=dark", `sid="alice"`, "sid = alice", "sid=alice; sid=bob", "sid="} {
		if got, want := get(c), cookieScopeV1(cookieRequest(c), "sid"); got != want {
			t.Errorf("Cookie %q: scope %s, want %s as before", c, got, want)
		}
	}
}

// FuzzCookieCredentialScope: whatever the Cookie header, a request that names the
// session cookie (in any case, with any value) is never "anonymous", and one whose
// session cookies Go's parser reads keeps the scope earlier versions gave it.
func FuzzCookieCredentialScope(f *testing.F) {
	for _, c := range []string{"sid=alice", `sid={"user":"alice"}`, `sid=a"b; x=1`, "SID=x", " sid = y ;", "sid", ";;", "_ga=1", "sid=été"} {
		f.Add(c, "")
		f.Add(c, "Bearer t")
	}
	scope := idemhttp.CookieCredentialScope([]string{"sid"}, idemhttp.DefaultCredentialHeaders...)
	f.Fuzz(func(t *testing.T, cookie, auth string) {
		r := cookieRequest(cookie)
		if auth != "" {
			r.Header.Set("Proxy-Authorization", auth)
		}
		got, err := scope(r)
		if err != nil {
			t.Fatal(err)
		}
		named, parsed := false, true
		for part := range strings.SplitSeq(cookie, ";") {
			name, val, _ := strings.Cut(strings.Trim(part, space), "=")
			if name = strings.Trim(name, space); strings.EqualFold(name, "sid") {
				named = true
				parsed = parsed && name == "sid" && validCookieValue(val)
			}
		}
		if named && got == "anonymous" {
			t.Fatalf("Cookie %q: scope anonymous", cookie)
		}
		if !named && auth == "" && got != "anonymous" {
			t.Fatalf("Cookie %q without the session cookie: scope %q, want anonymous", cookie, got)
		}
		if parsed && strings.Count(cookie, ";") < 3000 {
			if want := cookieScopeV1(r, "sid"); got != want {
				t.Fatalf("Cookie %q: scope %s, want %s as before", cookie, got, want)
			}
		}
	})
}

// space is what net/http trims around cookies, their names and values.
const space = " \t\r\n"

// validCookieValue is net/http's rule for a cookie value (quotes around it allowed).
func validCookieValue(v string) bool {
	if len(v) > 1 && v[0] == '"' && v[len(v)-1] == '"' {
		v = v[1 : len(v)-1]
	}
	for i := range len(v) {
		if c := v[i]; c < 0x20 || c >= 0x7f || c == '"' || c == ';' || c == '\\' {
			return false
		}
	}
	return true
}
