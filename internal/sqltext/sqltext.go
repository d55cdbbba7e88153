// Package sqltext makes text that idem did not write (a handler's error, a
// downstream's answer) fit the text columns it is stored in, on every database:
// PostgreSQL refuses a NUL byte or invalid UTF-8 in text, and MySQL in strict mode
// refuses a value longer than its column (TEXT: 65,535 bytes). A write that fails
// for its text is a row that can never be saved, retried for ever.
package sqltext

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"
	"unicode/utf8"
)

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

// Ident returns s made storable as an identifier column (a message id, a topic):
// s itself when it is valid UTF-8 without NUL and at most max bytes; otherwise a
// form that stays distinct for distinct inputs, so that two such values never
// meet in a unique index: quoted with Go escapes when s holds bytes a text column
// refuses, and when longer than max, cut and ended with "…#" and 16 hex digits of
// its SHA-256.
func Ident(s string, max int) string {
	if utf8.ValidString(s) && !strings.Contains(s, "\x00") && len(s) <= max {
		return s
	}
	q := s
	if !utf8.ValidString(s) || strings.Contains(s, "\x00") {
		q = strconv.Quote(s)
	}
	if len(q) <= max {
		return q
	}
	sum := sha256.Sum256([]byte(s))
	digest := hex.EncodeToString(sum[:8])
	tail := "…#" + digest
	if max < len(tail) {
		return digest[:min(max, len(digest))]
	}
	return strings.ToValidUTF8(q[:max-len(tail)], "") + tail
}
