package idemkey_test

import (
	"errors"
	"slices"
	"testing"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemkey"
)

func TestScope(t *testing.T) {
	t.Parallel()
	cases := []struct {
		parts []string
		scope string
	}{
		{[]string{"acme", "refund"}, "acme:refund"},
		{[]string{"acme"}, "acme"},
		{[]string{""}, ""},
		{[]string{"", ""}, ":"},
		{[]string{"a:b", "c"}, "a%3Ab:c"},
		{[]string{"a", "b:c"}, "a:b%3Ac"},
		{[]string{"100%", "x"}, "100%25:x"},
		{[]string{"%3A"}, "%253A"},
		{[]string{"ключ", "op/1"}, "ключ:op/1"},
	}
	for _, tc := range cases {
		if got := idemkey.Scope(tc.parts...); got != tc.scope {
			t.Errorf("Scope(%q) = %q, want %q", tc.parts, got, tc.scope)
		}
		got, err := idemkey.SplitScope(tc.scope)
		if err != nil || !slices.Equal(got, tc.parts) {
			t.Errorf("SplitScope(%q) = %q, %v; want %q", tc.scope, got, err, tc.parts)
		}
	}
	if idemkey.Scope("a:b", "c") == idemkey.Scope("a", "b:c") {
		t.Error(`Scope("a:b", "c") == Scope("a", "b:c")`)
	}
	if got := idemkey.Scope(); got != "" {
		t.Errorf("Scope() = %q, want empty", got)
	}
}

func TestSplitScopeMalformed(t *testing.T) {
	t.Parallel()
	cases := map[string]string{
		"%":        `has a malformed escape "%" at byte 0`,
		"a:%2":     `has a malformed escape "%2" at byte 2`,
		"ab:c%41":  `has a malformed escape "%41" at byte 4`,
		"x:y:%3a":  `has a malformed escape "%3a" at byte 4`, // lower case is not what Scope writes
		"%%25":     `has a malformed escape "%%2" at byte 0`,
		"ok%25:%z": `has a malformed escape "%z" at byte 6`,
	}
	for s, reason := range cases {
		parts, err := idemkey.SplitScope(s)
		var ie *idem.InputError
		if !errors.As(err, &ie) || ie.Field != "scope" || ie.Reason != reason || parts != nil {
			t.Errorf("SplitScope(%q) = %q, %v; want *idem.InputError for scope: %s", s, parts, err, reason)
		}
	}
}
