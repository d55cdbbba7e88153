package idemkey_test

import (
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/idemhq/idem/idemkey"
)

var fuzzSeeds = []string{
	"", "order-42", "café", "a\nb", "\xff", strings.Repeat("k", 256),
	"0190a6e4-2b1c-7d3e-8f4a-5b6c7d8e9f0a", "0190A6E4-2B1C-7D3E-8F4A-5B6C7D8E9F0A",
	"0190a6e4-2b1c-4d3e-8f4a-5b6c7d8e9f0a", "0190a6e4-2b1c-5d3e-8f4a-5b6c7d8e9f0a",
	"0190a6e4-2b1c-7d3e-cf4a-5b6c7d8e9f0a", "0190a6e4-2b1c-7d3e-8f4a-5b6c7d8e9f0g",
	"01ARZ3NDEKTSV4RRFFQ69G5FAV", "01arz3ndektsv4rrffq69g5fav", "7ZZZZZZZZZZZZZZZZZZZZZZZZZ",
	"8ZZZZZZZZZZZZZZZZZZZZZZZZZ", "01ARZ3NDEKTSV4RRFFQ69G5FAU",
}

func FuzzParse(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add(s)
	}
	now := time.Date(2026, 3, 14, 12, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, s string) {
		kind, err := idemkey.Parse(s)
		if verr := idemkey.Validate(s); (err == nil) != (verr == nil) {
			t.Fatalf("Parse(%q) error %v, but Validate says %v", s, err, verr)
		}
		if err != nil {
			return
		}
		_, terr := idemkey.Time(s)
		switch kind {
		case idemkey.KindUUIDv7, idemkey.KindULID:
			if terr != nil {
				t.Fatalf("Parse(%q) = %v but Time fails: %v", s, kind, terr)
			}
		case idemkey.KindOpaque, idemkey.KindUUIDv4, idemkey.KindUUIDv5:
			if terr == nil {
				t.Fatalf("Parse(%q) = %v but Time succeeds", s, kind)
			}
		default:
			t.Fatalf("Parse(%q) = unknown kind %v", s, kind)
		}
		if wantLen := map[idemkey.Kind]int{idemkey.KindUUIDv4: 36, idemkey.KindUUIDv5: 36,
			idemkey.KindUUIDv7: 36, idemkey.KindULID: 26}[kind]; wantLen != 0 && len(s) != wantLen {
			t.Fatalf("Parse(%q) = %v for a key of %d bytes", s, kind, len(s))
		}
		_, _ = idemkey.Stale(s, time.Hour, now) // must not panic
	})
}

func FuzzTime(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add(s, int64(1_773_489_600_000))
	}
	f.Add("", int64(0))
	f.Add("", int64(-1))
	f.Add("", int64(1<<48))
	f.Fuzz(func(t *testing.T, s string, ms int64) {
		if got, err := idemkey.Time(s); err == nil {
			if kind, _ := idemkey.Parse(s); kind != idemkey.KindUUIDv7 && kind != idemkey.KindULID {
				t.Fatalf("Time(%q) = %v for a %v key", s, got, kind)
			}
			if got.UnixMilli() < 0 || got.UnixMilli() >= 1<<48 || got.Nanosecond()%1e6 != 0 {
				t.Fatalf("Time(%q) = %v: out of range or finer than a millisecond", s, got)
			}
		}
		// A key made at any clock reading carries that reading, clamped to 48 bits.
		want := time.UnixMilli(min(max(ms, 0), 1<<48-1)).UTC()
		g := fixedClock(time.UnixMilli(ms))
		for _, k := range []string{g.V7(), g.ULID()} {
			if got, err := idemkey.Time(k); err != nil || !got.Equal(want) {
				t.Fatalf("clock at %d ms: Time(%s) = %v, %v; want %v", ms, k, got, err, want)
			}
		}
	})
}

func FuzzScope(f *testing.F) {
	f.Add("acme", "refund", "", uint8(2))
	f.Add("a:b", "c", "%3A", uint8(3))
	f.Add("%", "%25", "::", uint8(1))
	f.Add("", "", "", uint8(0))
	f.Add("ключ", "\xff", "a%zz", uint8(3))
	f.Fuzz(func(t *testing.T, a, b, c string, n uint8) {
		parts := []string{a, b, c}[:1+n%3]
		s := idemkey.Scope(parts...)
		got, err := idemkey.SplitScope(s)
		if err != nil || !slices.Equal(got, parts) {
			t.Fatalf("SplitScope(Scope(%q)) = %q, %v", parts, got, err)
		}
		// Escapes are ASCII, so valid UTF-8 parts make a valid UTF-8 scope.
		if !slices.ContainsFunc(parts, func(p string) bool { return !utf8.ValidString(p) }) && !utf8.ValidString(s) {
			t.Fatalf("Scope(%q) = %q is not valid UTF-8", parts, s)
		}
		// SplitScope accepts only what Scope writes, so a scope has one spelling.
		if split, err := idemkey.SplitScope(a); err == nil {
			if back := idemkey.Scope(split...); back != a {
				t.Fatalf("Scope(SplitScope(%q)) = %q", a, back)
			}
		}
	})
}

// FuzzValidateHeader checks the rules of ValidateHeader against their definition,
// and that an accepted header is always a valid idem.Key ID (what the middleware
// relies on to claim it without a second check).
func FuzzValidateHeader(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add(s)
	}
	for _, s := range []string{" k", "k ", "a b", "\x7f", "\x1f", "~", strings.Repeat("k", idemkey.MaxHeaderLen)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		err := idemkey.ValidateHeader(s)
		printable := s != "" && len(s) <= idemkey.MaxHeaderLen && s[0] != ' ' && s[len(s)-1] != ' ' &&
			!strings.ContainsFunc(s, func(r rune) bool { return r < 0x20 || r > 0x7e })
		if (err == nil) != printable {
			t.Fatalf("ValidateHeader(%q) = %v, want accepted=%v", s, err, printable)
		}
		if err == nil {
			if verr := idemkey.Validate(s); verr != nil {
				t.Fatalf("ValidateHeader accepts %q but Validate refuses it: %v", s, verr)
			}
		}
	})
}
