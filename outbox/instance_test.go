package outbox_test

import (
	"context"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/idemhq/idem/internal/testsvc"
	"github.com/idemhq/idem/outbox"
)

// A relay stopped cleanly removes its row; one that died is listed, stale, for an
// hour after it turned stale, then forgotten: Status no longer lists it and Cleanup
// deletes it. Ten restarts leave one relay listed, not ten.
func TestRelayInstancesExpire(t *testing.T) {
	t.Parallel()
	forEachDB(t, func(t *testing.T, e env) {
		ctx := context.Background()
		now := time.Now()
		for _, d := range []struct {
			name string
			ago  time.Duration
		}{{"died-10m-ago", 10 * time.Minute}, {"died-2h-ago", 2 * time.Hour}} {
			if _, err := e.db.Exec(`INSERT INTO idem_outbox_relays (instance, host, pid, started_at, last_round_at, poll_interval_ms, published_total, last_error)
				VALUES ($1, 'h', 1, $2, $2, 1000, 0, '')`, d.name, now.Add(-d.ago).UnixMilli()); err != nil {
				t.Fatal(err)
			}
		}
		admin := outbox.NewAdmin(e.tx)
		listed := func() (names []string, stale map[string]bool) {
			t.Helper()
			st, err := admin.Status(ctx)
			if err != nil {
				t.Fatal(err)
			}
			stale = map[string]bool{}
			for _, r := range st.Relays {
				names = append(names, r.Instance)
				stale[r.Instance] = r.Stale
			}
			return names, stale
		}
		for i := range 10 { // ten restarts, each stopped cleanly
			r, err := e.ob.Relay(&memSink{}, outbox.RelayConfig{Instance: "live", PollInterval: 20 * time.Millisecond,
				Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				t.Fatal(err)
			}
			rctx, stop := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() { done <- r.Run(rctx) }()
			testsvc.Eventually(t, time.Minute, "the relay listed", func() bool {
				names, stale := listed()
				return slices.Contains(names, "live") && !stale["live"]
			})
			stop()
			<-done
			if names, _ := listed(); slices.Contains(names, "live") {
				t.Fatalf("restart %d: Status lists %v after the relay stopped, want it gone", i+1, names)
			}
		}
		names, stale := listed()
		if !slices.Equal(names, []string{"died-10m-ago"}) || !stale["died-10m-ago"] {
			t.Fatalf("Status lists %v (stale %v), want only died-10m-ago, stale", names, stale)
		}
		r, err := e.ob.Relay(&memSink{}, outbox.RelayConfig{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := r.Cleanup(ctx); err != nil {
			t.Fatal(err)
		}
		var left []string
		rows, err := e.db.Query("SELECT instance FROM idem_outbox_relays ORDER BY instance")
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		for rows.Next() {
			var s string
			rows.Scan(&s)
			left = append(left, s)
		}
		if !slices.Equal(left, []string{"died-10m-ago"}) {
			t.Fatalf("after Cleanup the table holds %v, want died-10m-ago alone", left)
		}
	})
}
