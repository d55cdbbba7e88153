package admin

import (
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/admin/view"
)

// Bounds of what a request may carry.
const (
	// MaxLimit is the largest page a list returns; DefaultLimit is the page size
	// when limit is not given.
	MaxLimit     = 1000
	DefaultLimit = 100
	// MaxCursorLen bounds a cursor, in bytes.
	MaxCursorLen = 1024
	// MaxReasonLen bounds a reason or note, in bytes.
	MaxReasonLen = 1024
	// PreviewBytes is how much of a stored result or payload a response shows
	// unless the full-access token asks for ?full=1.
	PreviewBytes = view.PreviewBytes
)

// query reads the query parameters once, refusing a repeated one: two values of a
// parameter would let a proxy and the API disagree on which one counts.
type query struct {
	v url.Values
}

func parseQuery(r *http.Request) (query, error) {
	v, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return query{}, invalid("query", "is not a valid URL query (%s): percent-encode the values", view.Clean(err.Error(), 128))
	}
	for k, vs := range v {
		if len(vs) > 1 {
			return query{}, invalid(view.Clean(k, 64), "is given %d times: give it once", len(vs))
		}
	}
	return query{v: v}, nil
}

func (q query) get(name string) string { return q.v.Get(name) }

// text returns a free-text parameter: at most max bytes of valid UTF-8 without
// control characters.
func (q query) text(name string, max int) (string, error) {
	s := q.v.Get(name)
	return s, checkText(name, s, max, false)
}

func checkText(field, s string, max int, required bool) error {
	switch {
	case s == "" && required:
		return invalid(field, "is empty: set it")
	case len(s) > max:
		return invalid(field, "is longer than %d bytes (got %d): shorten it", max, len(s))
	case !utf8.ValidString(s):
		return invalid(field, "is not valid UTF-8")
	case strings.ContainsFunc(s, unicode.IsControl):
		return invalid(field, "has a control character: use printable characters only")
	}
	return nil
}

// page returns the cursor and limit of a listing.
func (q query) page() (cursor string, limit int, err error) {
	if cursor, err = q.text("cursor", MaxCursorLen); err != nil {
		return "", 0, err
	}
	limit, err = q.limit()
	return cursor, limit, err
}

func (q query) limit() (int, error) {
	s := q.v.Get("limit")
	if s == "" {
		return DefaultLimit, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > MaxLimit {
		return 0, invalid("limit", "is %q: use an integer from 1 to %d", view.Clean(s, 32), MaxLimit)
	}
	return n, nil
}

func (q query) flag(name string) (bool, error) {
	switch s := q.v.Get(name); s {
	case "", "0", "false":
		return false, nil
	case "1", "true":
		return true, nil
	default:
		return false, invalid(name, "is %q: use 1 or 0", view.Clean(s, 32))
	}
}

func (q query) time(name string) (time.Time, error) {
	s := q.v.Get(name)
	if s == "" {
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, invalid(name, "is %q: use an RFC 3339 time like 2006-01-02T15:04:05Z", view.Clean(s, 64))
	}
	return t, nil
}

// oneOf returns parameter name if it is empty or one of allowed.
func (q query) oneOf(name string, allowed ...string) (string, error) {
	s := q.v.Get(name)
	if s == "" {
		return "", nil
	}
	for _, a := range allowed {
		if s == a {
			return s, nil
		}
	}
	return "", invalid(name, "is %q: use one of %s", view.Clean(s, 64), strings.Join(allowed, ", "))
}

// keyPart checks a key's scope or id as idem.Key.Validate does, naming field as
// the API calls it.
func keyPart(field, s string) error {
	k := idem.Key{Scope: s, ID: "x"}
	if err := k.Validate(); err != nil {
		var ie *idem.InputError
		if errors.As(err, &ie) {
			return invalid(field, "%s: %s", ie.Reason, ie.Fix)
		}
		return err
	}
	return nil
}

// pathID reads the int64 path parameter {id}.
func pathID(r *http.Request) (int64, error) {
	s := r.PathValue("id")
	id, err := strconv.ParseInt(s, 10, 64)
	if err != nil || id < 1 {
		return 0, invalid("id", "is %q: use a positive integer", view.Clean(s, 32))
	}
	return id, nil
}

// pathName reads the string path parameter {id} (a saga id).
func pathName(r *http.Request) (string, error) {
	s := r.PathValue("id")
	return s, keyPart("id", s)
}

// reason checks the required reason (or note) of a mutation and records it for
// the audit.
func reason(c *call, field, s string) error {
	c.reason = view.Clean(s, MaxReasonLen)
	return checkText(field, s, MaxReasonLen, true)
}

// Preview shows stored bytes safely (view.NewPreview): their size and at most
// PreviewBytes of them, as text when they are printable UTF-8, else as hex.
type Preview = view.Preview
