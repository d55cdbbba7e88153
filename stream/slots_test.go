package stream_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/idemhq/idem/internal/sqltest"
	"github.com/idemhq/idem/internal/testsvc"
	"github.com/idemhq/idem/stream"
)

// userServer serves user:<name> channels to the caller whose session cookie names
// them, and counts sockets by that name.
func userServer(t *testing.T, cfg stream.ServerConfig) *fixture {
	t.Helper()
	user := func(r *http.Request) string {
		if c, err := r.Cookie("session"); err == nil {
			return c.Value
		}
		return ""
	}
	cfg.Authorize = func(r *http.Request, channel string) error {
		if u := user(r); u == "" || "user:"+u != channel {
			return errors.New("log in first")
		}
		return nil
	}
	cfg.Principal = user
	return newFixture(t, sqltest.SQLite(t), cfg)
}

// open opens a socket as user ("" for none) without sending anything.
func open(t *testing.T, f *fixture, user string) (*websocket.Conn, *http.Response, error) {
	t.Helper()
	h := http.Header{}
	if user != "" {
		h.Set("Cookie", "session="+user)
	}
	ws, resp, err := websocket.Dial(context.Background(), "ws"+strings.TrimPrefix(f.http.URL, "http")+"/stream", &websocket.DialOptions{HTTPHeader: h})
	if err == nil {
		t.Cleanup(func() { ws.CloseNow() })
	}
	return ws, resp, err
}

// login opens a socket as user, says hello on the user's channel, and returns the
// socket with the first frame the server answered (heartbeats skipped).
func login(t *testing.T, f *fixture, user string) (*websocket.Conn, wire, error) {
	t.Helper()
	ws, resp, err := open(t, f, user)
	if err != nil {
		status := 0
		if resp != nil {
			status = resp.StatusCode
		}
		return nil, wire{}, fmt.Errorf("handshake: %w (status %d)", err, status)
	}
	if err := ws.Write(context.Background(), websocket.MessageText, []byte(`{"type":"hello","channel":"user:`+user+`"}`)); err != nil {
		return ws, wire{}, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		_, data, err := ws.Read(ctx)
		if err != nil {
			return ws, wire{}, err
		}
		var w wire
		if err := json.Unmarshal(data, &w); err != nil {
			return ws, wire{}, fmt.Errorf("frame %s: %w", data, err)
		}
		if w.Type != "heartbeat" {
			return ws, w, nil
		}
	}
}

// gauge reads a gauge of the fixture's registry.
func (f *fixture) gauge(name string) float64 {
	mfs, _ := f.reg.Gather()
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	return -1
}

// 100 sockets that never say hello (no credentials needed to open one) do not keep
// alice out: they wait in a pool of their own, and when it is full the oldest is
// closed for the newest. Driven by progress: each handshake has completed (the
// server took its pending slot) before the next; no timeout is involved (the hello
// deadline is a minute).
func TestIdleSocketsDoNotKeepOthersOut(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name                   string
		maxPending, maxConns   int
		wantPending, wantAlive int
	}{
		{"a pending pool of 8, 4 connections", 8, 4, 8, 8},
		{"the default pending pool, 100 connections", 0, 100, 100, 100},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := userServer(t, stream.ServerConfig{MaxPending: tc.maxPending, MaxConnections: tc.maxConns, HandshakeTimeout: time.Minute})
			var idle []*websocket.Conn
			for range 100 {
				ws, _, err := open(t, f, "")
				if err == nil {
					idle = append(idle, ws)
				}
			}
			if got := f.gauge("idem_stream_pending"); len(idle) != 100 || got != float64(tc.wantPending) {
				t.Errorf("100 idle handshakes: %d accepted, idem_stream_pending %v; want 100 accepted, %d pending", len(idle), got, tc.wantPending)
			}
			ws, w, err := login(t, f, "alice")
			if err != nil || w.Type != "ready" {
				t.Fatalf("alice beside 100 idle sockets: %+v, %v; want ready", w, err)
			}
			ws.Close(websocket.StatusNormalClosure, "")
			// The evicted sockets were closed, not only forgotten: the oldest reads
			// the end of its connection.
			if evicted := len(idle) - tc.wantAlive; evicted > 0 {
				if _, err := next(t, idle[0], "never"); err == nil {
					t.Errorf("the oldest idle socket is still open after %d newer ones", evicted)
				}
				testsvc.Eventually(t, time.Minute, "the evictions counted", func() bool {
					return f.metric("idem_stream_disconnects_total", "evicted") >= float64(evicted+1)
				})
			}
		})
	}
}

// One principal holds at most MaxPerPrincipal sockets: one more is refused with
// 4429 and an error frame, alice still gets in, and a socket mallory closes gives
// her slot back.
func TestPrincipalCapLeavesRoomForOthers(t *testing.T) {
	t.Parallel()
	f := userServer(t, stream.ServerConfig{MaxConnections: 4, MaxPerPrincipal: 3})
	var mallory []*websocket.Conn
	for i := range 3 {
		ws, w, err := login(t, f, "mallory")
		if err != nil || w.Type != "ready" {
			t.Fatalf("mallory's socket %d: %+v, %v; want ready", i+1, w, err)
		}
		mallory = append(mallory, ws)
	}
	ws, w, err := login(t, f, "mallory")
	if err != nil || w.Type != "error" || w.Code != "too_many_connections" {
		t.Fatalf("mallory's 4th socket: %+v, %v; want an error frame too_many_connections", w, err)
	}
	if _, err := next(t, ws, "never"); websocket.CloseStatus(err) != stream.CloseTooMany {
		t.Fatalf("mallory's 4th socket closed with %v, want %d", err, stream.CloseTooMany)
	}
	if _, w, err := login(t, f, "alice"); err != nil || w.Type != "ready" {
		t.Fatalf("alice while mallory holds her cap: %+v, %v; want ready", w, err)
	}
	mallory[0].Close(websocket.StatusNormalClosure, "")
	testsvc.Eventually(t, time.Minute, "mallory's closed socket gone", func() bool { return f.gauge("idem_stream_clients") == 3 })
	if _, w, err := login(t, f, "mallory"); err != nil || w.Type != "ready" {
		t.Fatalf("mallory after closing a socket: %+v, %v; want ready", w, err)
	}
}
