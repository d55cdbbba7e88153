package view

import (
	"fmt"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// Clean makes a string read from a database or a request safe for a JSON message,
// a log line or a page: at most max bytes, invalid UTF-8 and control characters
// shown as '?'.
func Clean(s string, max int) string {
	if len(s) > max {
		s = s[:max]
	}
	return strings.Map(func(r rune) rune {
		if r == unicode.ReplacementChar || unicode.IsControl(r) {
			return '?'
		}
		return r
	}, strings.ToValidUTF8(s, "?"))
}

// Cell makes text from a database safe for a terminal table's cell: Escape, at
// most max runes, and "-" for the empty string.
func Cell(s string, max int) string {
	if s == "" {
		return "-"
	}
	return Escape(s, max)
}

// Escape makes s safe for a terminal: control characters (tabs and newlines too,
// which would break a table's columns, and escape sequences, which a terminal
// would obey) escaped as \x.., invalid UTF-8 escaped, the line separators and
// bidi overrides that would make the text read otherwise than it is escaped as
// \u...., a backslash doubled; at most max runes kept (max <= 0: all), with "…"
// where it was cut.
func Escape(s string, max int) string {
	var b strings.Builder
	n := 0
	for i := 0; i < len(s); {
		if max > 0 && n >= max {
			b.WriteString("…")
			break
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size <= 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r == '\\':
			b.WriteString(`\\`)
		case misleading(r):
			if r < 0x100 {
				fmt.Fprintf(&b, `\x%02x`, r)
			} else {
				fmt.Fprintf(&b, `\u%04x`, r)
			}
		default:
			b.WriteRune(r)
		}
		i += size
		n++
	}
	return b.String()
}

// misleading reports a control character, or a line separator or bidi override.
func misleading(r rune) bool {
	return unicode.IsControl(r) || r == '\u2028' || r == '\u2029' || r == '\u200e' || r == '\u200f' ||
		(r >= '\u202a' && r <= '\u202e') || (r >= '\u2066' && r <= '\u2069')
}

// When formats a time for a table: UTC, to the second, "-" when zero.
func When(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

// orZero maps the backends' "none" (Unix time 0, as their columns store it) to the
// zero time, which the JSON leaves out.
func orZero(t time.Time) time.Time {
	if t.UnixNano() == 0 {
		return time.Time{}
	}
	return t
}
