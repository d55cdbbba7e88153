package idem_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/idemhq/idem"
)

// A deadline survives FormatDeadline and ParseDeadline to the nanosecond, in UTC,
// whatever the zone it was made in.
func TestDeadlineRoundTrip(t *testing.T) {
	zone := time.FixedZone("UTC+5:30", 5*3600+1800)
	for _, in := range []time.Time{
		time.Date(2026, 11, 26, 20, 30, 0, 500_000_000, time.UTC),
		time.Date(2026, 11, 26, 20, 30, 0, 1, zone),
		time.Date(1999, 1, 1, 0, 0, 0, 0, time.UTC),
	} {
		v := idem.FormatDeadline(in)
		if !strings.HasSuffix(v, "Z") {
			t.Errorf("FormatDeadline(%v) = %q, want a UTC time ending in Z", in, v)
		}
		out, err := idem.ParseDeadline(v)
		if err != nil || !out.Equal(in) {
			t.Errorf("ParseDeadline(%q) = %v, %v; want %v", v, out, err, in)
		}
	}
}

// A bad value is an *idem.InputError naming the header and the fix.
func TestParseDeadlineBad(t *testing.T) {
	for _, v := range []string{"", "tomorrow", "1732653000", "2026-11-26 20:30:00", "2026-13-01T00:00:00Z"} {
		_, err := idem.ParseDeadline(v)
		ie, ok := errors.AsType[*idem.InputError](err)
		if !ok || ie.Field != idem.HeaderDeadline || ie.Fix == "" || !errors.Is(err, idem.ErrInvalid) {
			t.Errorf("ParseDeadline(%q) = %v, want an InputError on %s with a fix", v, err, idem.HeaderDeadline)
		}
	}
}

// ParseDeadline never panics, and what it accepts formats back to a value it
// accepts as the same instant.
func FuzzParseDeadline(f *testing.F) {
	f.Add("2026-11-26T20:30:00.5Z")
	f.Add("2026-11-26T20:30:00+05:30")
	f.Add("not a time")
	f.Add("")
	f.Fuzz(func(t *testing.T, v string) {
		d, err := idem.ParseDeadline(v)
		if err != nil {
			if !errors.Is(err, idem.ErrInvalid) {
				t.Fatalf("ParseDeadline(%q): %v is not an InputError", v, err)
			}
			return
		}
		again, err := idem.ParseDeadline(idem.FormatDeadline(d))
		if err != nil || !again.Equal(d) {
			t.Fatalf("ParseDeadline(FormatDeadline(%v)) = %v, %v", d, again, err)
		}
	})
}
