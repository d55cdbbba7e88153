package stream_test

import (
	"context"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/idemhq/idem/internal/sqltest"
	"github.com/idemhq/idem/internal/testsvc"
	"github.com/idemhq/idem/stream"
)

// Snapshot reports each channel's last seq and each connected client's acked seq
// and lag, which move as the clients ack; a client that leaves is no longer listed.
func TestSnapshotReportsClientsAndLag(t *testing.T) {
	t.Parallel()
	f := newFixture(t, sqltest.SQLite(t), stream.ServerConfig{AllowAnonymous: true})
	ctx := context.Background()
	appendN(t, f.srv, "c", 5)
	appendN(t, f.srv, "d", 2)
	fast := dial(t, f, `{"type":"hello","channel":"c","client":"fast"}`, nil)
	slow := dial(t, f, `{"type":"hello","channel":"c","client":"slow","since":1}`, nil)
	other := dial(t, f, `{"type":"hello","channel":"d","client":"other"}`, nil)
	for _, ws := range []*websocket.Conn{fast, slow, other} {
		if _, err := next(t, ws, "ready"); err != nil {
			t.Fatal(err)
		}
	}
	sent := func(st stream.StreamStatus) map[string]uint64 {
		m := map[string]uint64{}
		for _, c := range st.Clients {
			m[c.ID] = c.Sent
		}
		return m
	}
	testsvc.Eventually(t, time.Minute, "every event sent", func() bool {
		s := sent(f.srv.Snapshot())
		return s["fast"] == 5 && s["slow"] == 5 && s["other"] == 2
	})
	check := func(what string, want []stream.ClientStatus) {
		t.Helper()
		st := f.srv.Snapshot()
		wantChans := []stream.ChannelStatus{{Name: "c", LastSeq: 5, Clients: 2}, {Name: "d", LastSeq: 2, Clients: 1}}
		if st.TotalChannels != 2 || len(st.Channels) != 2 || st.Channels[0] != wantChans[0] || st.Channels[1] != wantChans[1] {
			t.Fatalf("%s: channels %+v (total %d), want %+v", what, st.Channels, st.TotalChannels, wantChans)
		}
		if st.TotalClients != len(want) || len(st.Clients) != len(want) {
			t.Fatalf("%s: clients %+v (total %d), want %+v", what, st.Clients, st.TotalClients, want)
		}
		for i := range want {
			if st.Clients[i] != want[i] {
				t.Fatalf("%s: clients %+v, want %+v (the most lagging first)", what, st.Clients, want)
			}
		}
	}
	check("before acks", []stream.ClientStatus{
		{Channel: "c", ID: "fast", Sent: 5, Acked: 0, Lag: 5},
		{Channel: "c", ID: "slow", Sent: 5, Acked: 1, Lag: 4},
		{Channel: "d", ID: "other", Sent: 2, Acked: 0, Lag: 2},
	})

	ack := func(ws *websocket.Conn, seq string) {
		if err := ws.Write(ctx, websocket.MessageText, []byte(`{"type":"ack","seq":`+seq+`}`)); err != nil {
			t.Fatal(err)
		}
	}
	ack(fast, "5")
	ack(slow, "3")
	ack(other, "2")
	testsvc.Eventually(t, time.Minute, "the acks", func() bool {
		n := 0
		for _, c := range f.srv.Snapshot().Clients {
			if c.Acked == map[string]uint64{"fast": 5, "slow": 3, "other": 2}[c.ID] {
				n++
			}
		}
		return n == 3
	})
	check("after acks", []stream.ClientStatus{
		{Channel: "c", ID: "slow", Sent: 5, Acked: 3, Lag: 2},
		{Channel: "c", ID: "fast", Sent: 5, Acked: 5, Lag: 0},
		{Channel: "d", ID: "other", Sent: 2, Acked: 2, Lag: 0},
	})

	other.CloseNow()
	testsvc.Eventually(t, time.Minute, "the client that left to be gone", func() bool {
		st := f.srv.Snapshot()
		return st.TotalClients == 2 && st.TotalChannels == 1 && st.Channels[0].Name == "c"
	})
}

// Snapshot may run while clients connect, receive and ack (run with -race).
func TestSnapshotDuringTraffic(t *testing.T) {
	t.Parallel()
	f := newFixture(t, sqltest.SQLite(t), stream.ServerConfig{AllowAnonymous: true})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			st := f.srv.Snapshot()
			if len(st.Clients) > st.TotalClients || len(st.Channels) > st.TotalChannels {
				t.Errorf("snapshot lists more than its totals: %+v", st)
				return
			}
		}
	}()
	for i := range 3 {
		c, _ := stream.NewClient(stream.ClientConfig{URL: f.http.URL, Channel: "c", ID: string(rune('a' + i)), OnEvent: func(stream.Event) error { return nil }})
		go func() { _ = c.Run(ctx) }()
	}
	appendN(t, f.srv, "c", 50)
	testsvc.Eventually(t, time.Minute, "three clients to ack everything", func() bool {
		st := f.srv.Snapshot()
		if st.TotalClients != 3 {
			return false
		}
		for _, c := range st.Clients {
			if c.Acked != 50 || c.Lag != 0 {
				return false
			}
		}
		return true
	})
	cancel()
	<-done
}
