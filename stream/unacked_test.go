package stream_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/idemhq/idem/idemtest"
	"github.com/idemhq/idem/internal/sqltest"
	"github.com/idemhq/idem/internal/testsvc"
	"github.com/idemhq/idem/stream"
)

// TestUnackedGauge: idem_stream_unacked sums, over the connected clients, the
// events sent and not acknowledged: M sent to each of two clients, then M−K after
// one acks K and the other all M, then nothing once the lagging client leaves.
func TestUnackedGauge(t *testing.T) {
	t.Parallel()
	const m, k = 6, 4
	f := newFixture(t, sqltest.SQLite(t), stream.ServerConfig{AllowAnonymous: true}) // registers on f.reg
	ctx := context.Background()
	appendN(t, f.srv, "c", m)
	lagging := dial(t, f, `{"type":"hello","channel":"c","client":"lagging"}`, nil)
	caughtUp := dial(t, f, `{"type":"hello","channel":"c","client":"caught-up"}`, nil)
	for _, ws := range []*websocket.Conn{lagging, caughtUp} {
		if _, err := next(t, ws, "ready"); err != nil {
			t.Fatal(err)
		}
		// Read on (and drop the events), so the server's pings are answered and
		// no client is dropped but the one that leaves.
		go func() {
			for {
				if _, _, err := ws.Read(ctx); err != nil {
					return
				}
			}
		}()
	}
	unacked := func(want float64) {
		t.Helper()
		testsvc.Eventually(t, time.Minute, fmt.Sprintf("idem_stream_unacked = %v", want), func() bool {
			got := idemtest.MetricValue(t, f.reg, "idem_stream_unacked", nil)
			return got == want
		})
	}
	unacked(2 * m)

	ack := func(ws *websocket.Conn, seq int) {
		if err := ws.Write(ctx, websocket.MessageText, []byte(fmt.Sprintf(`{"type":"ack","seq":%d}`, seq))); err != nil {
			t.Fatal(err)
		}
	}
	ack(lagging, k)
	ack(caughtUp, m)
	unacked(m - k)

	lagging.CloseNow()
	unacked(0)
}
