package view

import (
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"unicode"
	"unicode/utf8"
)

// PreviewBytes is how much of a stored result, payload or body a view shows
// unless the whole is asked for (the API's ?full=1, the CLI's --full).
const PreviewBytes = 64

// Preview shows stored bytes safely: their size and at most PreviewBytes of them,
// as text when they are printable UTF-8, else as hex.
type Preview struct {
	Size int `json:"size"`
	// Encoding is "text" or "hex": how Preview is written.
	Encoding  string `json:"encoding"`
	Preview   string `json:"preview"`
	Truncated bool   `json:"truncated"`
	// Full is the whole of the bytes (base64), only when asked for.
	Full []byte `json:"full,omitempty"`
}

// NewPreview is the one preview of b every surface shows; full adds the whole.
// Text is printable UTF-8 only (newlines and tabs allowed): bytes with another
// control character are shown as hex, so that a "text" preview is safe to print
// wherever it goes, escaped or not.
func NewPreview(b []byte, full bool) Preview {
	p := Preview{Size: len(b), Encoding: "text"}
	head := b
	if len(head) > PreviewBytes {
		head, p.Truncated = cutRunes(head[:PreviewBytes]), true
	}
	if printable(head) {
		p.Preview = string(head)
	} else {
		p.Encoding, p.Preview = "hex", hex.EncodeToString(b[:min(len(b), PreviewBytes)])
	}
	if full {
		p.Full = b
	}
	return p
}

// cutRunes drops the bytes of a multi-byte rune that a cut split, so that the cut
// does not make text look binary.
func cutRunes(b []byte) []byte {
	for i := 0; i < utf8.UTFMax-1 && len(b) > 0 && !utf8.Valid(b); i++ {
		b = b[:len(b)-1]
	}
	return b
}

func printable(b []byte) bool {
	if !utf8.Valid(b) {
		return false
	}
	for _, r := range string(b) {
		if !unicode.IsPrint(r) && r != '\n' && r != '\t' && r != '\r' {
			return false
		}
	}
	return true
}

// Text is the preview as a terminal table shows it: escaped (Escape), its
// encoding named before it when not text, "…" where it was cut, and its size.
func (p Preview) Text() string {
	return previewText(p.Size, p.Encoding, p.Preview, p.Truncated)
}

func previewText(size int, encoding, preview string, truncated bool) string {
	if size == 0 {
		return "(empty)"
	}
	s := Escape(preview, 0)
	if encoding != "text" && encoding != "utf-8" {
		s = encoding + ":" + s
	}
	if truncated {
		s += "…"
	}
	return fmt.Sprintf("%s (%d bytes)", s, size)
}

// FullText is the whole of b for a terminal: escaped text when it is UTF-8, else
// "hex:" and its hex.
func FullText(b []byte) string {
	if utf8.Valid(b) {
		return Escape(string(b), 0)
	}
	return "hex:" + hex.EncodeToString(b)
}

// BodyPreview is at most PreviewBytes of a stored HTTP body.
type BodyPreview struct {
	Size int64 `json:"size"`
	// Encoding is "utf-8" (printable text, written as is) or "base64" (anything
	// else, such as NUL bytes or invalid UTF-8).
	Encoding  string `json:"encoding"`
	Preview   string `json:"preview"`
	Truncated bool   `json:"truncated"`
}

// NewBodyPreview shows at most PreviewBytes of body, of size bytes in all (a
// stored body may be shorter than the response's).
func NewBodyPreview(body []byte, size int64) BodyPreview {
	p := BodyPreview{Size: size, Encoding: "utf-8", Truncated: int64(len(body)) > PreviewBytes || int64(len(body)) < size}
	head := body[:min(len(body), PreviewBytes)]
	text := head
	if len(body) > PreviewBytes {
		text = cutRunes(text)
	}
	if printable(text) {
		p.Preview = string(text)
	} else {
		p.Encoding, p.Preview = "base64", base64.StdEncoding.EncodeToString(head)
	}
	return p
}

// Text is the body preview as a terminal table shows it, as Preview.Text.
func (b BodyPreview) Text() string {
	return previewText(int(b.Size), b.Encoding, b.Preview, b.Truncated)
}
