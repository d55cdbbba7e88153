package idemredis

import (
	"errors"
	"slices"
	"testing"

	"github.com/idemhq/idem"
)

// A cursor carries the SCAN cursor and the ids a SCAN reply left over the page; any
// other string is an *idem.InputError on field "cursor".
func TestListCursor(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		cur     uint64
		pending []string
	}{
		{17, nil},
		{0, []string{"a", "b c", "ü*?[]\\"}},
		{1<<64 - 1, []string{"x"}},
	} {
		c, err := encodeCursor(tc.cur, tc.pending)
		if err != nil {
			t.Fatal(err)
		}
		cur, pending, finished, err := decodeCursor(c)
		if err != nil || cur != tc.cur || !slices.Equal(pending, tc.pending) || finished != (tc.cur == 0) {
			t.Fatalf("decode(encode(%d, %q)) = %d, %q, %v, %v", tc.cur, tc.pending, cur, pending, finished, err)
		}
	}
	zero, _ := encodeCursor(0, nil)
	ctl, _ := encodeCursor(5, []string{"a\x01"})
	for _, c := range []string{zero, ctl, "!", "LTE", "MTIK"} {
		var ie *idem.InputError
		if _, _, _, err := decodeCursor(c); !errors.As(err, &ie) || ie.Field != "cursor" {
			t.Errorf("decodeCursor(%q) = %v, want an *idem.InputError on cursor", c, err)
		}
	}
}

func TestEscapeGlob(t *testing.T) {
	t.Parallel()
	if got, want := escapeGlob(`p*:1:a?[b]\`), `p\*:1:a\?\[b\]\\`; got != want {
		t.Fatalf("escapeGlob = %q, want %q", got, want)
	}
}
