package cursor

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/idemhq/idem"
)

func TestRoundTripAndHostileCursors(t *testing.T) {
	t.Parallel()
	for _, parts := range [][]string{{"order-1", "do:charge"}, {"", "x.y"}, {"ü/.", strings.Repeat("k", 255)}} {
		got, err := Decode(Encode(parts...), len(parts))
		if err != nil || !slices.Equal(got, parts) {
			t.Fatalf("Decode(Encode(%q)) = %q, %v", parts, got, err)
		}
	}
	if got, err := Decode("", 2); got != nil || err != nil {
		t.Fatalf(`Decode("") = %q, %v; want the first page`, got, err)
	}
	// Parts no text column holds (NUL, invalid UTF-8) are refused too: PostgreSQL
	// would fail the query.
	for _, bad := range []string{"a", "a.b.c", "!!.a", strings.Repeat("a", MaxLen+1), Encode("x\x00y", "a"), Encode("a", "\xff")} {
		var ie *idem.InputError
		if _, err := Decode(bad, 2); !errors.As(err, &ie) || ie.Field != "cursor" {
			t.Errorf("Decode(%.20q) = %v, want an *idem.InputError on cursor", bad, err)
		}
	}
	for _, l := range []int{-1, 0, idem.MaxListLimit + 1} {
		if Limit(l) == nil {
			t.Errorf("Limit(%d) accepted", l)
		}
	}
	if Limit(1) != nil || Limit(idem.MaxListLimit) != nil {
		t.Error("a limit in range refused")
	}
}
