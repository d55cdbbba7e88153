package idemkey_test

import (
	"strings"
	"testing"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemkey"
)

func TestValidate(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, id string
		ok       bool
	}{
		{"empty", "", false},
		{"one byte", "k", true},
		{"255 bytes", strings.Repeat("k", 255), true},
		{"256 bytes", strings.Repeat("k", 256), false},
		{"NUL", "a\x00b", false},
		{"newline", "a\nb", false},
		{"DEL", "a\x7fb", false},
		{"C1 control", "a\u0085b", false},
		{"invalid UTF-8", "a\xffb", false},
		{"non-ASCII", "café ☕", true},
		{"spaces", " a b ", true},
		{"UUID", idemkey.NewV7(), true},
	}
	for _, tc := range cases {
		err := idemkey.Validate(tc.id)
		if tc.ok != (err == nil) || (err != nil && !isInputError(err, "key")) {
			t.Errorf("%s: Validate = %v; want ok=%v, or an *idem.InputError for key", tc.name, err, tc.ok)
		}
		// Validate promises the rules of idem.Key: the stores must agree.
		if keyErr := (idem.Key{Scope: "s", ID: tc.id}).Validate(); (keyErr == nil) != (err == nil) {
			t.Errorf("%s: Validate = %v but idem.Key.Validate = %v", tc.name, err, keyErr)
		}
	}
}

func TestValidateHeader(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, value, reason string // reason "" means valid
	}{
		{"empty", "", "is empty"},
		{"UUID", idemkey.NewV4(), ""},
		{"255 characters", strings.Repeat("k", 255), ""},
		{"256 characters", strings.Repeat("k", 256), "is longer than 255 characters (got 256)"},
		{"inner space and punctuation", `a b"\~!`, ""},
		{"leading space", " abc", "starts or ends with a space"},
		{"trailing space", "abc ", "starts or ends with a space"},
		{"tab", "a\tb", "has byte 0x09 at byte 1, which is not printable ASCII"},
		{"DEL", "ab\x7f", "has byte 0x7F at byte 2, which is not printable ASCII"},
		{"non-ASCII", "café", "has byte 0xC3 at byte 3, which is not printable ASCII"},
	}
	for _, tc := range cases {
		err := idemkey.ValidateHeader(tc.value)
		if tc.reason == "" {
			if err != nil {
				t.Errorf("%s: ValidateHeader = %v, want nil", tc.name, err)
			} else if idemkey.Validate(tc.value) != nil {
				t.Errorf("%s: a valid header is not a valid key", tc.name)
			}
			continue
		}
		ie, ok := err.(*idem.InputError)
		if !ok || ie.Field != "Idempotency-Key" || ie.Reason != tc.reason || ie.Fix == "" {
			t.Errorf("%s: ValidateHeader = %#v; want *idem.InputError{Field: Idempotency-Key, Reason: %q, Fix: …}",
				tc.name, err, tc.reason)
		}
	}
}
