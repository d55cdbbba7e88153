// Package sqltext makes text that idem did not write (a handler's error, a
// downstream's answer) fit the text columns it is stored in, on every database:
// PostgreSQL refuses a NUL byte or invalid UTF-8 in text, and MySQL in strict mode
// refuses a value longer than its column (TEXT: 65,535 bytes). A write that fails
// for its text is a row that can never be saved, retried for ever.
package sqltext

import "strings"

// Fit returns s with invalid UTF-8 and NUL bytes replaced by U+FFFD, cut to at most
// max bytes (on a rune boundary, ending in "…" when cut).
func Fit(s string, max int) string {
	s = strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "\uFFFD")
	if len(s) <= max {
		return s
	}
	const ellipsis = "…"
	if max < len(ellipsis) {
		return ""
	}
	return strings.ToValidUTF8(s[:max-len(ellipsis)], "") + ellipsis
}

// Join joins old and add with "; ", each fitted (Fit) to part bytes, and keeps the
// result within max bytes by cutting the middle: the beginning (why a row first
// went wrong) and the end (what happened last) are what a reader needs.
func Join(old, add string, part, max int) string {
	add = Fit(add, part)
	if old == "" {
		return add
	}
	s := Fit(old, max) + "; " + add
	if len(s) <= max {
		return s
	}
	const gap = " … "
	head := (max - len(gap)) / 2
	tail := max - len(gap) - head
	return strings.ToValidUTF8(s[:head], "") + gap + strings.ToValidUTF8(s[len(s)-tail:], "")
}
