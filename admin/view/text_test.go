package view

import (
	"strings"
	"testing"
)

// Moved from cmd/idem (TestEscapeText) with the functions it checks.
func TestEscapeAndPreview(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"plain":              "plain",
		"tab\there\nline":    `tab\x09here\x0aline`,
		"\x1b[31mred\x1b[0m": `\x1b[31mred\x1b[0m`,
		"bad \xff utf8":      `bad \xff utf8`,
		"bidi \u202eevil":    `bidi \u202eevil`,
		`back\slash`:         `back\\slash`,
		"héllo wörld":        "héllo wörld",
		"\u0085next line c1": `\x85next line c1`,
	} {
		if got := Escape(in, 0); got != want {
			t.Errorf("Escape(%q) = %q, want %q", in, got, want)
		}
	}
	if got := Cell(strings.Repeat("é", 100), 10); got != strings.Repeat("é", 10)+"…" {
		t.Errorf("Cell cut to 10 runes = %q", got)
	}
	p := NewPreview(append([]byte("\x00\xff"), make([]byte, 100)...), false)
	if p.Encoding != "hex" || !p.Truncated || p.Size != 102 || len(p.Preview) != 2*PreviewBytes || p.Full != nil {
		t.Errorf("preview of binary bytes = %+v", p)
	}
	p = NewPreview([]byte(strings.Repeat("€", 30)), true) // 90 bytes; 64 cuts a rune
	if p.Encoding != "text" || !p.Truncated || p.Preview != strings.Repeat("€", 21) || len(p.Full) != 90 {
		t.Errorf("preview of long text = %+v", p)
	}
}
