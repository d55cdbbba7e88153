package cursor

import (
	"errors"
	"strings"
	"testing"

	"github.com/idemhq/idem"
)

func TestRoundTrip(t *testing.T) {
	t.Parallel()
	for _, id := range []string{"a", "order/17?x=1&y=%", "ü", strings.Repeat("z", idem.MaxKeyLen)} {
		c := EncodeID(id)
		if strings.ContainsAny(c, "+/=?&%") {
			t.Errorf("EncodeID(%q) = %q, not URL-safe", id, c)
		}
		if got, err := DecodeID(c); err != nil || got != id {
			t.Errorf("DecodeID(EncodeID(%q)) = %q, %v", id, got, err)
		}
	}
	if got, err := DecodeID(""); err != nil || got != "" {
		t.Errorf(`DecodeID("") = %q, %v; want the first page`, got, err)
	}
}

func TestGarbage(t *testing.T) {
	t.Parallel()
	for _, c := range []string{"not a cursor!", "===", EncodeID("a\x00b"), EncodeID("\xff"), EncodeID(strings.Repeat("z", idem.MaxKeyLen+1)), strings.Repeat("A", 1<<20)} {
		var ie *idem.InputError
		if _, err := DecodeID(c); !errors.As(err, &ie) || ie.Field != "cursor" {
			t.Errorf("DecodeID(%.40q) = %v, want an *idem.InputError on cursor", c, err)
		}
	}
}
