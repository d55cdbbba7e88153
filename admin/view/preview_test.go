package view

import (
	"encoding/hex"
	"strings"
	"testing"
)

// TestNewPreview pins the one preview every surface shows: text only when the
// bytes are printable UTF-8 (newlines and tabs allowed), else hex of the first
// PreviewBytes; a cut never splits a rune; Text is how a table prints it.
func TestNewPreview(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("é", 40) // 80 bytes: the cut at 64 falls between runes
	for _, tc := range []struct {
		name string
		in   []byte
		want Preview
		text string
	}{
		{"empty", nil, Preview{Encoding: "text"}, "(empty)"},
		{"text", []byte(`{"sku":"A-1"}`), Preview{Size: 13, Encoding: "text", Preview: `{"sku":"A-1"}`}, `{"sku":"A-1"} (13 bytes)`},
		{"lines", []byte("a\tb\r\nc"), Preview{Size: 6, Encoding: "text", Preview: "a\tb\r\nc"}, `a\x09b\x0d\x0ac (6 bytes)`},
		{"escape sequence", []byte("slot\x1b[7"), Preview{Size: 7, Encoding: "hex", Preview: "736c6f741b5b37"}, "hex:736c6f741b5b37 (7 bytes)"},
		{"NUL", []byte("a\x00b"), Preview{Size: 3, Encoding: "hex", Preview: "610062"}, "hex:610062 (3 bytes)"},
		{"invalid UTF-8", []byte("\xff\xfe"), Preview{Size: 2, Encoding: "hex", Preview: "fffe"}, "hex:fffe (2 bytes)"},
		{"long text", []byte(long), Preview{Size: 80, Encoding: "text", Preview: strings.Repeat("é", 32), Truncated: true},
			strings.Repeat("é", 32) + "… (80 bytes)"},
		{"long binary", []byte(strings.Repeat("\x01", 100)), Preview{Size: 100, Encoding: "hex",
			Preview: hex.EncodeToString([]byte(strings.Repeat("\x01", PreviewBytes))), Truncated: true},
			"hex:" + strings.Repeat("01", PreviewBytes) + "… (100 bytes)"},
	} {
		got := NewPreview(tc.in, false)
		if got.Size != tc.want.Size || got.Encoding != tc.want.Encoding || got.Preview != tc.want.Preview ||
			got.Truncated != tc.want.Truncated || got.Full != nil {
			t.Errorf("%s: NewPreview = %+v, want %+v", tc.name, got, tc.want)
		}
		if got.Text() != tc.text {
			t.Errorf("%s: Text = %q, want %q", tc.name, got.Text(), tc.text)
		}
		if full := NewPreview(tc.in, true); string(full.Full) != string(tc.in) {
			t.Errorf("%s: full = %q", tc.name, full.Full)
		}
	}
}

func TestBodyPreview(t *testing.T) {
	t.Parallel()
	if p := NewBodyPreview([]byte("ok"), 2); p != (BodyPreview{Size: 2, Encoding: "utf-8", Preview: "ok"}) || p.Text() != "ok (2 bytes)" {
		t.Errorf("text body: %+v %q", p, p.Text())
	}
	if p := NewBodyPreview([]byte("\x00"), 5); p.Encoding != "base64" || p.Preview != "AA==" || !p.Truncated ||
		p.Text() != "base64:AA==… (5 bytes)" {
		t.Errorf("binary body, cut: %+v %q", p, p.Text())
	}
}
