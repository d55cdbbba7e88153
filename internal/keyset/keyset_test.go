package keyset

import (
	"errors"
	"strings"
	"testing"

	"github.com/idemhq/idem"
)

func TestRoundTrip(t *testing.T) {
	t.Parallel()
	for _, id := range []string{"a", "order/17?x=1&y=%", "ü", strings.Repeat("z", idem.MaxKeyLen)} {
		c := Encode(id)
		if strings.ContainsAny(c, "+/=?&%") {
			t.Errorf("Encode(%q) = %q, not URL-safe", id, c)
		}
		if got, err := Decode(c); err != nil || got != id {
			t.Errorf("Decode(Encode(%q)) = %q, %v", id, got, err)
		}
	}
	if got, err := Decode(""); err != nil || got != "" {
		t.Errorf(`Decode("") = %q, %v; want the first page`, got, err)
	}
}

func TestGarbage(t *testing.T) {
	t.Parallel()
	for _, c := range []string{"not a cursor!", "===", Encode("a\x00b"), Encode("\xff"), Encode(strings.Repeat("z", idem.MaxKeyLen+1)), strings.Repeat("A", 1<<20)} {
		var ie *idem.InputError
		if _, err := Decode(c); !errors.As(err, &ie) || ie.Field != "cursor" {
			t.Errorf("Decode(%.40q) = %v, want an *idem.InputError on cursor", c, err)
		}
	}
}
