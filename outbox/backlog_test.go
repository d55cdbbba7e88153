package outbox_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/idemhq/idem/outbox"
)

// TestBacklogGauges: idem_outbox_unpublished counts the messages waiting and
// idem_outbox_oldest_age_seconds is the age of the oldest of them on the outbox's
// clock, not of the newest; once the relay has published them both read 0.
func TestBacklogGauges(t *testing.T) {
	t.Parallel()
	forEachDB(t, func(t *testing.T, e env) {
		ctx := context.Background()
		t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
		var clock atomic.Int64 // Unix milliseconds
		clock.Store(t0.UnixMilli())
		outbox.SetClock(e.ob, func() time.Time { return time.UnixMilli(clock.Load()) })
		for i := range 3 {
			if err := placeOrder(ctx, e, fmt.Sprintf("old-%d", i), "", true); err != nil {
				t.Fatal(err)
			}
		}
		clock.Store(t0.Add(30 * time.Second).UnixMilli())
		for i := range 2 {
			if err := placeOrder(ctx, e, fmt.Sprintf("new-%d", i), "", true); err != nil {
				t.Fatal(err)
			}
		}
		placeOrder(ctx, e, "rolled-back", "", false) // never waiting
		clock.Store(t0.Add(90 * time.Second).UnixMilli())

		reg := prometheus.NewRegistry()
		r, err := e.ob.Relay(&memSink{}, outbox.RelayConfig{Registerer: reg})
		if err != nil {
			t.Fatal(err)
		}
		want := `# HELP idem_outbox_oldest_age_seconds Age of the oldest unpublished outbox message.
# TYPE idem_outbox_oldest_age_seconds gauge
idem_outbox_oldest_age_seconds 90
# HELP idem_outbox_unpublished Outbox messages waiting to be published (not parked).
# TYPE idem_outbox_unpublished gauge
idem_outbox_unpublished 5
`
		gauges := []string{"idem_outbox_oldest_age_seconds", "idem_outbox_unpublished"}
		if err := testutil.GatherAndCompare(reg, strings.NewReader(want), gauges...); err != nil {
			t.Errorf("before the relay ran: %v", err)
		}
		drainRelay(t, r)
		want = `# HELP idem_outbox_oldest_age_seconds Age of the oldest unpublished outbox message.
# TYPE idem_outbox_oldest_age_seconds gauge
idem_outbox_oldest_age_seconds 0
# HELP idem_outbox_unpublished Outbox messages waiting to be published (not parked).
# TYPE idem_outbox_unpublished gauge
idem_outbox_unpublished 0
`
		if err := testutil.GatherAndCompare(reg, strings.NewReader(want), gauges...); err != nil {
			t.Errorf("after the relay published everything: %v", err)
		}
	})
}
