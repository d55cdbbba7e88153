package sqltext

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestFit(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		in   string
		max  int
		want string
	}{
		{"card declined", 100, "card declined"},
		{"a\x00b", 100, "a\uFFFDb"},
		{"a\xffb", 100, "a\uFFFDb"},
		{"abcdef", 5, "ab…"},
		{"ééé", 5, "é…"}, // not cut inside a rune
		{"abcdef", 2, ""},
	} {
		if got := Fit(c.in, c.max); got != c.want {
			t.Errorf("Fit(%q, %d) = %q, want %q", c.in, c.max, got, c.want)
		}
	}
}

// Join keeps the first reason and the last one when the whole would not fit.
func TestJoin(t *testing.T) {
	t.Parallel()
	if got := Join("", "first", 10, 100); got != "first" {
		t.Errorf("Join to nothing = %q", got)
	}
	if got := Join("first", "second", 10, 100); got != "first; second" {
		t.Errorf("Join = %q", got)
	}
	s := "turned around: charge refused"
	for i := range 100 {
		s = Join(s, strings.Repeat("x", 30)+" retried "+string(rune('a'+i%26)), 64, 200)
		if len(s) > 200 {
			t.Fatalf("Join grew to %d bytes, over 200", len(s))
		}
	}
	if !strings.HasPrefix(s, "turned around: charge refused") || !strings.HasSuffix(s, " retried v") || !strings.Contains(s, " … ") {
		t.Errorf("after 100 joins: %q, want the first reason, a gap and the last", s)
	}
}

// Whatever the input, the text fits: valid UTF-8, no NUL, within its bound.
func FuzzJoin(f *testing.F) {
	f.Add("first", "second\x00\xff", 8, 20)
	f.Add("ééééé", "ü", 3, 7)
	f.Fuzz(func(t *testing.T, old, add string, part, max int) {
		part, max = part%5000, max%5000
		if part < 0 || max < 8 {
			return
		}
		for _, s := range []string{Fit(add, max), Join(old, add, part, max)} {
			if !utf8.ValidString(s) || strings.Contains(s, "\x00") || len(s) > max {
				t.Fatalf("%q (%d bytes, max %d)", s, len(s), max)
			}
		}
	})
}

func TestIdent(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", 100)
	for _, c := range []struct {
		in   string
		max  int
		want string
	}{
		{"order-1", 64, "order-1"},
		{"a\x00b", 64, `"a\x00b"`},
		{"a\xffb", 64, `"a\xffb"`},
	} {
		if got := Ident(c.in, c.max); got != c.want {
			t.Errorf("Ident(%q, %d) = %q, want %q", c.in, c.max, got, c.want)
		}
	}
	got := Ident(long, 40)
	if len(got) > 40 || !utf8.ValidString(got) || !strings.HasPrefix(got, "xxx") || !strings.Contains(got, "…#") {
		t.Errorf("Ident(100 x, 40) = %q (%d bytes): want a cut, hashed form within 40 bytes", got, len(got))
	}
	// Distinct inputs stay distinct, whether they differ in a refused byte or
	// after the cut.
	seen := map[string]string{}
	for _, in := range []string{"a\x00", "a\xff", "a\uFFFD", long, long + "y", long + "z", "a\x00" + long, "a\xff" + long} {
		out := Ident(in, 40)
		if prev, ok := seen[out]; ok {
			t.Errorf("Ident(%q) = Ident(%q) = %q", in, prev, out)
		}
		seen[out] = in
		if strings.Contains(out, "\x00") || !utf8.ValidString(out) || len(out) > 40 {
			t.Errorf("Ident(%q) = %q: not storable", in, out)
		}
	}
}
