package pgcdc_test

import (
	"testing"
	"time"

	"github.com/idemhq/idem/idempg/pgcdc"
)

// Stalled counts from the later of the oldest waiting message and the last
// publication, and says which of the two ways a relay is stuck.
func TestHealthStalled(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	bound := 30 * time.Second
	for _, tc := range []struct {
		name string
		h    pgcdc.Health
		at   time.Duration
		want string
	}{
		{"idle", pgcdc.Health{Streaming: true}, time.Hour, ""},
		{"waiting within the bound", pgcdc.Health{Streaming: true, WaitingSince: t0}, bound, ""},
		{"waiting past the bound", pgcdc.Health{Streaming: true, WaitingSince: t0}, bound + 1, "messages wait and none was published"},
		{"publishing while messages keep coming", pgcdc.Health{Streaming: true, WaitingSince: t0, LastPublished: t0.Add(time.Hour)},
			time.Hour + bound, ""},
		{"not streaming past the bound", pgcdc.Health{FailingSince: t0}, bound + 1, "the relay cannot stream the slot"},
		{"a standby", pgcdc.Health{}, time.Hour, ""},
	} {
		if what, d := tc.h.Stalled(t0.Add(tc.at), bound); what != tc.want || (what != "" && d <= bound) {
			t.Errorf("%s: Stalled = %q, %v; want %q", tc.name, what, d, tc.want)
		}
	}
}
