package redact_test

import (
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/idemhq/idem/internal/redact"
)

// shapes are the ways a credential sits in a URL that leaked before: a token or key
// as the user name alone, a password holding a character the URL parser splits at
// (# / ? @ %, a space), and a URL that does not parse at all. Each is a function of
// scheme and secret.
var shapes = []struct {
	name string
	url  func(scheme, secret string) string
}{
	{"token-only userinfo", func(sc, s string) string { return sc + "://" + s + "@host.internal:4222" }},
	{"user name, empty password", func(sc, s string) string { return sc + "://" + s + ":@host.internal/x" }},
	{"password with #", func(sc, s string) string { return sc + "://app:" + s + "#x@host.internal:5432/db" }},
	{"password with # after digits", func(sc, s string) string { return sc + "://app:1234#" + s + "@host.internal:5432/db" }},
	{"password with /", func(sc, s string) string { return sc + "://app:a/" + s + "@host.internal/db" }},
	{"password with / after digits", func(sc, s string) string { return sc + "://app:99/" + s + "@host.internal/db" }},
	{"token with /", func(sc, s string) string { return sc + "://" + s + "/b@host.internal" }},
	{"password with ?", func(sc, s string) string { return sc + "://app:" + s + "?x@host.internal/db" }},
	{"password with ? after digits", func(sc, s string) string { return sc + "://app:77?" + s + "@host.internal/db" }},
	{"password with @", func(sc, s string) string { return sc + "://app:" + s + "@x@host.internal/db" }},
	{"password with a bad % escape", func(sc, s string) string { return sc + "://app:%zz" + s + "@host.internal/db" }},
	{"password with % escapes", func(sc, s string) string { return sc + "://app:" + url.PathEscape(s+"#/?@") + "@host.internal/db" }},
	{"password with a space", func(sc, s string) string { return sc + "://app:" + s + " x@host.internal/db" }},
	{"unparsable", func(sc, s string) string { return sc + "://app:" + s + "@host.internal:port:x/db" }},
	{"control character", func(sc, s string) string { return sc + "://app:" + s + "\x7f@host.internal/db" }},
}

// userShapes are the first shapes, whose secret is the user name: a database role
// for postgres:// and mysql://, which is not hidden (roleScheme).
const userShapes = 2

func roleScheme(scheme string) bool {
	switch strings.ToLower(scheme) {
	case "postgres", "postgresql", "mysql":
		return true
	}
	return false
}

// Every scheme idem reads, so that no scheme's parsing differs.
var schemes = []string{"postgres", "postgresql", "mysql", "sqlite", "redis", "rediss", "redis-cluster", "nats", "tls",
	"kafka", "amqp", "amqps", "http", "https", "pubsub", "sqs"}

// The secret of every shape, on every scheme, is masked by URL (a flag's value) and
// by String (a message quoting the URL, or the URL parser's error about it).
func TestURLShapes(t *testing.T) {
	t.Parallel()
	for _, sc := range schemes {
		for i, sh := range shapes {
			if i < userShapes && roleScheme(sc) {
				continue
			}
			raw := sh.url(sc, secret)
			msgs := map[string]string{"URL": redact.URL(raw)}
			if !strings.Contains(raw, " ") {
				// Unquoted in a message, a URL ends at a space: what follows one
				// cannot be told from the words around it.
				msgs["String"] = redact.String("dial " + raw + ": refused")
			}
			if _, err := url.Parse(raw); err != nil {
				msgs["String(parse error)"] = redact.String(err.Error())
			}
			for f, got := range msgs {
				if strings.Contains(got, secret) || strings.Contains(got, url.PathEscape(secret)) {
					t.Errorf("%s %s: %s = %q, holds the secret", sc, sh.name, f, got)
				}
			}
			if !strings.Contains(msgs["URL"], "host.internal") {
				t.Errorf("%s %s: URL = %q, want the host kept", sc, sh.name, msgs["URL"])
			}
		}
	}
}

// FuzzURL puts any secret, unencoded, in each shape: neither URL nor String of the
// URL or of its parse error holds it.
func FuzzURL(f *testing.F) {
	for _, s := range []string{"S3cr3tPa55", "p@ss/w:rd?#", "a b c d e", "%zz%zz%zz", "ab\ncdefgh", "tok:en-xyz", "\"quoted\""} {
		f.Add("redis", s, uint8(0))
		f.Add("https", s, uint8(3))
	}
	f.Fuzz(func(t *testing.T, scheme, secret string, shape uint8) {
		i := int(shape) % len(shapes)
		if i < userShapes && roleScheme(scheme) {
			return
		}
		raw := shapes[i].url(scheme, secret)
		probe := strings.ToLower(scheme) + strings.ReplaceAll(raw, secret, "") + redact.Mask
		if len(secret) < 8 || strings.Contains(probe, secret) || !validScheme.MatchString(scheme) {
			return // too short to tell, a piece of the rest of the URL, or not a URL
		}
		if got := redact.URL(raw); strings.Contains(got, secret) {
			t.Fatalf("URL(%q) = %q", raw, got)
		}
		if _, err := url.Parse(raw); err != nil && !strings.ContainsAny(secret, " \t\n\"'`<>\\") {
			// In a message, a URL ends at a space or a quote: a secret holding one
			// cannot be told from the words around it.
			if got := redact.String(err.Error()); strings.Contains(got, secret) {
				t.Fatalf("String(%q) = %q", err, got)
			}
		}
	})
}

// validScheme is RFC 3986's scheme syntax.
var validScheme = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9+.-]*$`)
