package cursor

import (
	"errors"
	"strings"
	"testing"

	"github.com/idemhq/idem"
)

func TestScopeRoundTripAndGarbage(t *testing.T) {
	t.Parallel()
	for _, sc := range []string{"a", "cred:0123abcd", "tenant:a%_*?[x]/", strings.Repeat("z", idem.MaxKeyLen)} {
		if got, err := DecodeScope(EncodeScope(sc)); err != nil || got != sc {
			t.Errorf("DecodeScope(EncodeScope(%q)) = %q, %v", sc, got, err)
		}
	}
	if got, err := DecodeScope(""); err != nil || got != "" {
		t.Errorf(`DecodeScope("") = %q, %v; want the first page`, got, err)
	}
	for _, c := range []string{"not a cursor!", EncodeScope("a\x00b"), EncodeScope(strings.Repeat("z", idem.MaxKeyLen+1)), Encode("a", "b"), strings.Repeat("A", 1<<20)} {
		var ie *idem.InputError
		if _, err := DecodeScope(c); !errors.As(err, &ie) || ie.Field != "cursor" {
			t.Errorf("DecodeScope(%.40q) = %v, want an *idem.InputError on cursor", c, err)
		}
	}
}
