// Package redact hides credentials in URLs, DSNs and the messages that quote them,
// for errors and logs: the one function every command and adapter of idem routes
// such text through.
//
// It hides the password of a URL's userinfo (postgres, redis, amqp, nats, kafka,
// http and any other scheme), a user name that has no password beside it (a NATS
// token in nats://TOKEN@host, an API key in https://KEY@host or https://KEY:@host;
// not a database role in postgres:// or mysql://),
// the values of query parameters and keyword/value pairs whose name says secret
// (password, secret, token, key, auth, signature…), the userinfo of a URL that
// does not parse or holds an "@" after its host (a password with an unencoded
// # / or ?, which the parser split at the wrong place), and the text a URL
// parser's error quotes from such a URL (invalid port ":…", invalid URL escape
// "%…"). What it cannot recognize as a credential, such as a secret in a URL's
// path, it leaves.
package redact

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"regexp"
	"strconv"
	"strings"
)

// Mask replaces every hidden value.
const Mask = "xxxxx"

// URL returns raw with its credentials masked. A string that is not a URL with a
// scheme is scrubbed as text (String).
func URL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme == "" || u.Opaque != "" || AtAfterHost(u) {
		return scrubUserinfo(scrubPairs(raw))
	}
	plain := u.String()
	if red := redactParsed(u); red != plain {
		return red
	}
	return raw // nothing hidden: as given, not as url.URL.String writes it again
}

// AtAfterHost reports whether u holds an "@" after its host: in its path, query or
// fragment. That is almost always a password or token holding an unencoded "/", "?"
// or "#", which the parser took for the end of the userinfo (postgres://app:a/b@db
// parses as host "app", port "a" refused, but postgres://app:12/b@db as host app,
// port 12, path "/b@db"): what precedes the last "@" cannot be told from a
// credential.
func AtAfterHost(u *url.URL) bool {
	return strings.Contains(u.EscapedPath(), "@") || strings.Contains(u.RawQuery, "@") || strings.Contains(u.Fragment, "@")
}

func redactParsed(u *url.URL) string {
	switch pw, has := u.User.Password(); {
	case has && pw != "":
		if !placeholder(pw) {
			u.User = url.UserPassword(u.User.Username(), Mask)
		}
	case u.User != nil && u.User.Username() != "" && u.User.Username() != "user" && !roleSchemes[u.Scheme]:
		// A user name alone is a token or an API key as often as a name
		// (nats://TOKEN@host, https://KEY:@api): "user" is the usage texts' example.
		u.User = url.User(Mask)
	}
	if u.RawQuery != "" {
		if q, err := url.ParseQuery(u.RawQuery); err == nil {
			changed := false
			for k, vs := range q {
				if secretName(k) {
					for i := range vs {
						vs[i] = Mask
					}
					changed = true
				}
			}
			if changed {
				u.RawQuery = q.Encode()
			}
		} else {
			u.RawQuery = scrubPairs(u.RawQuery)
		}
	}
	if u.Fragment != "" {
		u.Fragment = scrubPairs(u.Fragment)
		u.RawFragment = ""
	}
	return u.String()
}

// roleSchemes are the schemes whose user name is a database role, never a token:
// their drivers name it in every connection error ("user=app"), as the operator
// needs.
var roleSchemes = map[string]bool{"postgres": true, "postgresql": true, "mysql": true}

// urlInText matches a URL inside a message: a scheme, "://" and what follows up to a
// space or a quote.
var urlInText = regexp.MustCompile("[a-zA-Z][a-zA-Z0-9+.-]*://[^\\s\"'`<>]+")

// hostUserinfo matches "user:password@" outside a URL that parses, as in a Kafka
// seed broker list, a DSN quoted piecemeal or a URL with a scheme that is not one.
var hostUserinfo = regexp.MustCompile(`([^\s:/@"'=]*):([^\s@/"']+)@`)

// secretWords end the names whose values are secret, in messages and queries.
const secretWords = `(?:[a-z0-9]*(?:password|passwd|secret|token|credentials?|signature)|pwd|pass|sig|auth|apikey|api[_-]?key|access[_-]?key|private[_-]?key)`

// pairs matches name=value in a message, such as a keyword/value DSN
// ("host=db password=hunter2") or a query quoted in an error, where the name says
// secret.
var pairs = regexp.MustCompile(`(?i)\b(_*(?:[a-z0-9]+[_.\-])*` + secretWords + `)(\s*=\s*)('[^']*'|"[^"]*"|[^\s&;,'"]+)`)

// secretParam matches the name of a query parameter whose value is secret: the
// words of pairs, and key alone (an API key, as in ?key=…).
var secretParam = regexp.MustCompile(`(?i)^(?:[a-z0-9]+[_.\-])*(?:` + secretWords + `|key)$`)

// parseErrorQuote matches the piece of a URL that an error of Go's URL parser
// quotes (invalid port ":a", invalid URL escape "%zz", invalid character " " in
// host name): a piece of a password, when the password held a reserved character.
var parseErrorQuote = regexp.MustCompile(`(invalid (?:port|URL escape|character) )"(?:[^"\\]|\\.)*"`)

// quotedURL matches a URL quoted whole by a *url.Error (parse "…", Post "…"): a
// space or quote inside does not end it there.
var quotedURL = regexp.MustCompile(`\b((?:parse|Get|Head|Post|Put|Patch|Delete) )("[a-zA-Z][a-zA-Z0-9+.-]*://(?:[^"\\]|\\.)*")`)

// String returns s, such as an error message of a driver, with every URL in it
// passed through URL, every secret-named pair's value masked, and what a URL
// parser's error quotes of a URL masked.
func String(s string) string {
	if !strings.ContainsAny(s, ":=@") {
		return s
	}
	s = quotedURL.ReplaceAllStringFunc(s, func(m string) string {
		sub := quotedURL.FindStringSubmatch(m)
		u, err := strconv.Unquote(sub[2])
		if err != nil {
			return m
		}
		red := URL(u)
		if red == u && !strings.Contains(u, "@") {
			// Go's parser quotes a URL up to its "#": a password cut there.
			red = scrubCutPassword(u)
		}
		return sub[1] + strconv.Quote(red)
	})
	s = urlInText.ReplaceAllStringFunc(s, func(m string) string {
		// A URL quoted inside a sentence may end with punctuation that is not its.
		trail := len(m) - len(strings.TrimRight(m, ".,;:)]}"))
		return URL(m[:len(m)-trail]) + m[len(m)-trail:]
	})
	s = parseErrorQuote.ReplaceAllString(s, `${1}"`+Mask+`"`)
	return scrubHostUserinfo(scrubPairs(s))
}

// scrubHostUserinfo masks the password of every user:password@host.
func scrubHostUserinfo(s string) string {
	return hostUserinfo.ReplaceAllStringFunc(s, func(m string) string {
		sub := hostUserinfo.FindStringSubmatch(m)
		if placeholder(sub[2]) {
			return m
		}
		return sub[1] + ":" + Mask + "@"
	})
}

// placeholder reports whether a password is one of the examples of usage texts
// (postgres://user:pass@host) or RabbitMQ's public default (guest:guest): left as
// is, so help stays readable.
func placeholder(pw string) bool {
	switch pw {
	case "pass", "password", "guest", Mask:
		return true
	}
	return false
}

// scrubPairs masks the values of secret-named pairs.
func scrubPairs(s string) string {
	return pairs.ReplaceAllStringFunc(s, func(m string) string {
		sub := pairs.FindStringSubmatch(m)
		if sub[3] == Mask || sub[3] == url.QueryEscape(Mask) {
			return m
		}
		return sub[1] + sub[2] + Mask
	})
}

// scrubUserinfo masks what lies between "://" and the last "@" of a URL that does
// not parse, or holds an "@" after its host: its credentials cannot be told from
// its user name, host or path. (A space does not end it: the password may hold one.)
func scrubUserinfo(s string) string {
	scheme, rest, ok := strings.Cut(s, "://")
	if !ok {
		return scrubHostUserinfo(s)
	}
	at := strings.LastIndex(rest, "@")
	if at < 0 {
		return s
	}
	return scheme + "://" + Mask + rest[at:]
}

// scrubCutPassword masks what follows the colon of a URL without "@" whose port is
// not a number, as a *url.Error quotes it: a password cut at a "#" (Go's URL
// parser quotes a URL up to its fragment, so "redis://u:pa#ss@h" is quoted as
// "redis://u:pa", port "pa").
func scrubCutPassword(s string) string {
	scheme, rest, ok := strings.Cut(s, "://")
	if !ok {
		return s
	}
	auth := rest[:strings.IndexAny(rest+"/", "/?#")]
	skip := 0
	if strings.HasPrefix(auth, "[") { // an IPv6 literal's colons
		skip = max(strings.Index(auth, "]"), 0)
	}
	i := strings.Index(auth[skip:], ":")
	if i < 0 || strings.Trim(auth[skip+i+1:], "0123456789") == "" {
		return scheme + "://" + rest
	}
	return scheme + "://" + auth[:skip+i+1] + Mask
}

// secretName reports whether a query parameter's name says its value is secret.
func secretName(name string) bool { return secretParam.MatchString(name) }

// Error returns err with its message redacted (String). errors.Is and errors.As see
// the original chain; only Error changes. Nil stays nil, and an error whose message
// holds nothing to hide is returned as is.
func Error(err error) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	if red := String(msg); red != msg {
		return &redactedError{err: err, msg: red}
	}
	return err
}

type redactedError struct {
	err error
	msg string
}

func (e *redactedError) Error() string { return e.msg }
func (e *redactedError) Unwrap() error { return e.err }

// Handler returns a slog.Handler that redacts the message and every string, error
// and fmt.Stringer attribute of each record before h sees it.
func Handler(h slog.Handler) slog.Handler {
	if r, ok := h.(handler); ok {
		return r
	}
	return handler{h}
}

type handler struct{ h slog.Handler }

func (r handler) Enabled(ctx context.Context, l slog.Level) bool { return r.h.Enabled(ctx, l) }

func (r handler) Handle(ctx context.Context, rec slog.Record) error {
	out := slog.NewRecord(rec.Time, rec.Level, String(rec.Message), rec.PC)
	rec.Attrs(func(a slog.Attr) bool {
		out.AddAttrs(attr(a))
		return true
	})
	return r.h.Handle(ctx, out)
}

func (r handler) WithAttrs(as []slog.Attr) slog.Handler {
	red := make([]slog.Attr, len(as))
	for i, a := range as {
		red[i] = attr(a)
	}
	return handler{r.h.WithAttrs(red)}
}

func (r handler) WithGroup(name string) slog.Handler { return handler{r.h.WithGroup(name)} }

func attr(a slog.Attr) slog.Attr {
	v := a.Value.Resolve()
	switch v.Kind() {
	case slog.KindString:
		return slog.String(a.Key, String(v.String()))
	case slog.KindGroup:
		g := v.Group()
		red := make([]any, len(g))
		for i, ga := range g {
			red[i] = attr(ga)
		}
		return slog.Group(a.Key, red...)
	case slog.KindAny:
		switch x := v.Any().(type) {
		case error:
			return slog.String(a.Key, String(x.Error()))
		case fmt.Stringer:
			return slog.String(a.Key, String(x.String()))
		case []byte:
			return slog.String(a.Key, String(string(x)))
		}
	}
	return slog.Attr{Key: a.Key, Value: v}
}
