package idem

import (
	"fmt"
	"time"
)

// HeaderDeadline carries the time after which a request or message must not be
// acted on: the sender has given up by then (idemhttp.Transport sets it from its
// retry budget, outbox from an enqueue option). The value is an RFC 3339 UTC
// timestamp (FormatDeadline). Receivers compare it with their own clock, so they
// assume clocks agree within idemkey.MaxSkew; see docs.
const HeaderDeadline = "Idem-Deadline"

// FormatDeadline is t as HeaderDeadline carries it.
func FormatDeadline(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

// ParseDeadline reads a HeaderDeadline value.
func ParseDeadline(v string) (time.Time, error) {
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return time.Time{}, &InputError{Field: HeaderDeadline, Reason: fmt.Sprintf("is not an RFC 3339 time (got %.64q)", v),
			Fix: "send it as FormatDeadline writes it, e.g. 2026-11-26T20:30:00.5Z"}
	}
	return t, nil
}
