package idemkey_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemkey"
)

func TestParse(t *testing.T) {
	t.Parallel()
	ns := idemkey.NewNamespace("checkout")
	cases := []struct {
		key  string
		want idemkey.Kind
	}{
		{idemkey.NewV4(), idemkey.KindUUIDv4},
		{idemkey.Intent(ns, "cart-1"), idemkey.KindUUIDv5},
		{idemkey.Derive("k", "charge"), idemkey.KindUUIDv5},
		{idemkey.NewV7(), idemkey.KindUUIDv7},
		{strings.ToUpper(idemkey.NewV7()), idemkey.KindUUIDv7},
		{idemkey.NewULID(), idemkey.KindULID},
		{strings.ToLower(idemkey.NewULID()), idemkey.KindULID},
		{"7ZZZZZZZZZZZZZZZZZZZZZZZZZ", idemkey.KindULID},             // the largest ULID
		{"8ZZZZZZZZZZZZZZZZZZZZZZZZZ", idemkey.KindOpaque},           // overflows 128 bits
		{"01ARZ3NDEKTSV4RRFFQ69G5FAU", idemkey.KindOpaque},           // U is not Crockford
		{"01ARZ3NDEKTSV4RRFFQ69G5FA", idemkey.KindOpaque},            // 25 characters
		{"0190a6e4-2b1c-7d3e-8f4a-5b6c7d8e9f0a", idemkey.KindUUIDv7}, // canonical v7
		{"0190a6e42b1c7d3e8f4a5b6c7d8e9f0a", idemkey.KindOpaque},     // no hyphens
		{"{0190a6e4-2b1c-7d3e-8f4a-5b6c7d8e9f0a}", idemkey.KindOpaque},
		{"urn:uuid:0190a6e4-2b1c-7d3e-8f4a-5b6c7d8e9f0a", idemkey.KindOpaque},
		{"0190a6e4-2b1c-7d3e-cf4a-5b6c7d8e9f0a", idemkey.KindOpaque}, // Microsoft variant
		{"0190a6e4-2b1c-1d3e-8f4a-5b6c7d8e9f0a", idemkey.KindOpaque}, // version 1
		{"0190a6e4_2b1c-7d3e-8f4a-5b6c7d8e9f0a", idemkey.KindOpaque},
		{"order-42", idemkey.KindOpaque},
		{"café ☕", idemkey.KindOpaque},
	}
	for _, tc := range cases {
		got, err := idemkey.Parse(tc.key)
		if err != nil || got != tc.want {
			t.Errorf("Parse(%q) = %v, %v; want %v", tc.key, got, err, tc.want)
		}
	}
	for _, bad := range []string{"", strings.Repeat("a", 256), "a\nb", "\xff"} {
		if _, err := idemkey.Parse(bad); !isInputError(err, "key") {
			t.Errorf("Parse(%q) error = %v; want an *idem.InputError for key", bad, err)
		}
	}
}

func TestKindString(t *testing.T) {
	t.Parallel()
	want := map[idemkey.Kind]string{idemkey.KindOpaque: "opaque", idemkey.KindUUIDv4: "UUIDv4",
		idemkey.KindUUIDv5: "UUIDv5", idemkey.KindUUIDv7: "UUIDv7", idemkey.KindULID: "ULID", 9: "Kind(9)", -1: "Kind(-1)"}
	for k, s := range want {
		if k.String() != s {
			t.Errorf("Kind(%d).String() = %q, want %q", int(k), k.String(), s)
		}
	}
}

func TestTimeWithoutTime(t *testing.T) {
	t.Parallel()
	cases := map[string]string{
		idemkey.NewV4():                        "carries no time: it is a UUIDv4 key",
		idemkey.Derive("k", "s"):               "carries no time: it is a UUIDv5 key",
		"order-42":                             "carries no time: it is an opaque key",
		"0190a6e4-2b1c-1d3e-8f4a-5b6c7d8e9f0a": "carries no time: it is an opaque key",
		"":                                     "is empty",
		"0190a6e4-2b1c-7d3e-8f4a-5b6c7d8e9f0a\x00": "has a control character U+0000 at byte 36",
	}
	for key, reason := range cases {
		_, err := idemkey.Time(key)
		var ie *idem.InputError
		if !errors.As(err, &ie) || ie.Field != "key" || ie.Reason != reason || ie.Fix == "" {
			t.Errorf("Time(%q) error = %#v; want *idem.InputError{Field: key, Reason: %q, Fix: …}", key, err, reason)
		}
	}
}

func TestStaleAndCheckFresh(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 3, 14, 12, 0, 0, 0, time.UTC)
	const window = 24 * time.Hour
	at := func(d time.Duration) string { return fixedClock(now.Add(d)).V7() }
	ulidAt := func(d time.Duration) string { return fixedClock(now.Add(d)).ULID() }
	cases := []struct {
		name  string
		key   string
		stale bool
		want  error // ErrStale, ErrFuture, idem.ErrInvalid or nil
	}{
		{"fresh", at(-time.Hour), false, nil},
		{"exactly at the window", at(-window), false, nil},
		{"just past the window", at(-window - time.Millisecond), true, idemkey.ErrStale},
		{"long past", at(-window * 400), true, idemkey.ErrStale},
		{"ULID fresh", ulidAt(-window + time.Millisecond), false, nil},
		{"ULID just past", ulidAt(-window - time.Millisecond), true, idemkey.ErrStale},
		{"ahead within skew", at(idemkey.MaxSkew), false, nil},
		{"ahead beyond skew", at(idemkey.MaxSkew + time.Millisecond), false, idemkey.ErrFuture},
		{"ULID ahead beyond skew", ulidAt(time.Hour), false, idemkey.ErrFuture},
		{"UUIDv4", idemkey.NewV4(), false, idem.ErrInvalid},
		{"opaque", "order-42", false, idem.ErrInvalid},
		{"invalid", "", false, idem.ErrInvalid},
	}
	for _, tc := range cases {
		stale, err := idemkey.Stale(tc.key, window, now)
		wantErr := tc.want
		if wantErr == idemkey.ErrStale {
			wantErr = nil // Stale reports staleness as true, not as an error
		}
		if stale != tc.stale || !errors.Is(err, wantErr) || (wantErr == nil) != (err == nil) {
			t.Errorf("%s: Stale(%s) = %v, %v; want %v, %v", tc.name, tc.key, stale, err, tc.stale, wantErr)
		}
		err = idemkey.CheckFresh(tc.key, window, now)
		if !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
			t.Errorf("%s: CheckFresh(%s) = %v; want %v", tc.name, tc.key, err, tc.want)
		}
	}
}

func TestStaleErrorFields(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 3, 14, 12, 0, 0, 0, time.UTC)
	keyTime := now.Add(-26 * time.Hour)
	key := fixedClock(keyTime).V7()
	err := idemkey.CheckFresh(key, 24*time.Hour, now)
	var se *idemkey.StaleError
	if !errors.As(err, &se) {
		t.Fatalf("CheckFresh = %v; want *StaleError", err)
	}
	if se.Key != key || !se.Time.Equal(keyTime) || se.Age != 26*time.Hour || se.Window != 24*time.Hour {
		t.Errorf("StaleError = %+v; want Key %s, Time %v, Age 26h, Window 24h", se, key, keyTime)
	}
	want := "idemkey: key " + key + " is 26h0m0s old, older than the 24h0m0s retention window: " +
		"it may have been processed and forgotten; reject it or raise the window"
	if err.Error() != want {
		t.Errorf("message\n got %s\nwant %s", err, want)
	}

	err = idemkey.CheckFresh(fixedClock(now.Add(3*time.Minute)).ULID(), 24*time.Hour, now)
	var fe *idemkey.FutureError
	if !errors.As(err, &fe) || fe.Ahead != 3*time.Minute || !strings.Contains(err.Error(), "3m0s ahead") {
		t.Errorf("CheckFresh(3m ahead) = %v; want *FutureError 3m0s ahead", err)
	}
	if errors.Is(err, idemkey.ErrStale) || errors.Is(err, idem.ErrInvalid) {
		t.Errorf("a FutureError matches ErrStale or ErrInvalid: %v", err)
	}
}

func TestCheckFreshWindow(t *testing.T) {
	t.Parallel()
	for _, w := range []time.Duration{0, -time.Hour} {
		if err := idemkey.CheckFresh(idemkey.NewV7(), w, time.Now()); !isInputError(err, "window") {
			t.Errorf("CheckFresh(window %v) = %v; want an *idem.InputError for window", w, err)
		}
	}
}

func isInputError(err error, field string) bool {
	var ie *idem.InputError
	return errors.As(err, &ie) && ie.Field == field && errors.Is(err, idem.ErrInvalid)
}

// TimeOf agrees with Time on every kind of key, and builds nothing for an untimed
// one (it is on the middleware's path for every request).
func TestTimeOf(t *testing.T) { // not parallel: AllocsPerRun
	for _, key := range []string{idemkey.NewV7(), idemkey.NewULID(), idemkey.NewV4(), "order-17", idemkey.Intent(idemkey.NewNamespace("t"), "x"), "01ARZ3NDEKTSV4RRFFQ69G5FAV"} {
		want, err := idemkey.Time(key)
		got, ok := idemkey.TimeOf(key)
		if ok != (err == nil) || !got.Equal(want) {
			t.Errorf("TimeOf(%q) = %v, %v; Time = %v, %v", key, got, ok, want, err)
		}
	}
	if n := testing.AllocsPerRun(100, func() { idemkey.TimeOf("f47ac10b-58cc-4372-a567-0e02b2c3d479") }); n != 0 {
		t.Errorf("TimeOf of a UUIDv4 allocates %v times, want 0", n)
	}
}
