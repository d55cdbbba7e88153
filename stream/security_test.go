package stream_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/internal/sqltest"
	"github.com/idemhq/idem/internal/testsvc"
	"github.com/idemhq/idem/stream"
)

// A server that does not say who may read refuses to be built: open mode is an
// explicit choice.
func TestNewServerNeedsAuthorizeOrAllowAnonymous(t *testing.T) {
	t.Parallel()
	store := sqlStore(t, sqltest.SQLite(t))
	_, err := stream.NewServer(store, stream.ServerConfig{})
	var ie *idem.InputError
	if !errors.As(err, &ie) || ie.Field != "ServerConfig.Authorize" || !strings.Contains(ie.Fix, "AllowAnonymous") {
		t.Fatalf("NewServer without Authorize or AllowAnonymous: %v; want an InputError on ServerConfig.Authorize naming AllowAnonymous", err)
	}
	_, err = stream.NewServer(store, stream.ServerConfig{AllowAnonymous: true, OriginPatterns: []string{"[bad"}})
	if !errors.As(err, &ie) || ie.Field != "ServerConfig.OriginPatterns" {
		t.Fatalf("NewServer with a bad origin pattern: %v", err)
	}
	for _, cfg := range []stream.ServerConfig{
		{AllowAnonymous: true},
		{Authorize: func(*http.Request, string) error { return nil }},
	} {
		srv, err := stream.NewServer(store, cfg)
		if err != nil {
			t.Fatal(err)
		}
		srv.Close()
	}
}

// Cross-site WebSocket hijacking: a page on another site opens the socket with
// the user's cookie. The handshake is refused (403); the server's own origin
// and a listed one are accepted. GET /events applies the same rule, and sends
// no CORS headers.
func TestForeignOriginIsRefused(t *testing.T) {
	t.Parallel()
	f := newFixture(t, sqltest.SQLite(t), stream.ServerConfig{
		OriginPatterns: []string{"app.example.com"},
		Authorize: func(r *http.Request, channel string) error {
			c, err := r.Cookie("session")
			if err != nil || "user:"+c.Value != channel {
				return errors.New("log in first")
			}
			return nil
		},
	})
	appendN(t, f.srv, "user:alice", 2)
	cookie := "session=alice"
	wsURL := "ws" + strings.TrimPrefix(f.http.URL, "http") + "/stream"
	for _, tc := range []struct {
		origin string
		ok     bool
	}{
		{"https://evil.example", false},
		{"https://app.example.com.evil.example", false},
		{"null", false},
		{f.http.URL, true},                // same origin
		{"https://app.example.com", true}, // listed
		{"", true},                        // not a browser
	} {
		h := http.Header{"Cookie": {cookie}}
		if tc.origin != "" {
			h.Set("Origin", tc.origin)
		}
		ws, resp, err := websocket.Dial(context.Background(), wsURL, &websocket.DialOptions{HTTPHeader: h})
		if !tc.ok {
			if err == nil {
				ws.CloseNow()
				t.Fatalf("Origin %q: handshake accepted, want 403", tc.origin)
			}
			if resp == nil || resp.StatusCode != http.StatusForbidden {
				t.Fatalf("Origin %q: %v (response %v), want 403", tc.origin, err, resp)
			}
		} else {
			if err != nil {
				t.Fatalf("Origin %q: %v, want the handshake accepted", tc.origin, err)
			}
			_ = ws.Write(context.Background(), websocket.MessageText, []byte(`{"type":"hello","channel":"user:alice"}`))
			if w, err := next(t, ws, "event"); err != nil || w.Event.Seq != 1 {
				t.Fatalf("Origin %q: first event %+v, %v", tc.origin, w, err)
			}
			ws.CloseNow()
		}

		req, _ := http.NewRequest(http.MethodGet, f.http.URL+"/events?channel=user:alice", nil)
		req.Header = h.Clone()
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		want := http.StatusOK
		if !tc.ok {
			want = http.StatusForbidden
		}
		if res.StatusCode != want {
			t.Fatalf("GET /events from Origin %q: %d, want %d", tc.origin, res.StatusCode, want)
		}
		if acao := res.Header.Get("Access-Control-Allow-Origin"); acao != "" {
			t.Fatalf("GET /events sent Access-Control-Allow-Origin %q", acao)
		}
	}
}

// Numbers from a client are checked: out of range, negative, fractional, text
// or past the head is bad input (close 4400 on the socket, 400 on REST), never
// read as "trimmed" after wrapping around.
func TestOutOfRangeNumbersAreBadInput(t *testing.T) {
	t.Parallel()
	f := newFixture(t, sqltest.SQLite(t), stream.ServerConfig{AllowAnonymous: true})
	appendN(t, f.srv, "c", 3)

	for _, since := range []string{`18446744073709551615`, `9223372036854775808`, `-1`, `1.5`, `1e2`, `"2"`, `true`, `4`, `99999999999999999999999`} {
		ws := dial(t, f, `{"type":"hello","channel":"c","since":`+since+`}`, nil)
		w, err := next(t, ws, "error")
		if err != nil || w.Code != "bad_frame" || !strings.Contains(w.Message, "since") {
			t.Fatalf("since %s: error frame %+v, %v; want bad_frame naming since", since, w, err)
		}
		if _, err := next(t, ws, "never"); websocket.CloseStatus(err) != stream.CloseBadHello {
			t.Fatalf("since %s: closed with %v, want %d", since, err, stream.CloseBadHello)
		}
	}
	for _, id := range []string{strings.Repeat("x", 200), "a b", "\u00e9"} {
		ws := dial(t, f, `{"type":"hello","channel":"c","client":"`+id+`"}`, nil)
		if w, err := next(t, ws, "error"); err != nil || w.Code != "bad_frame" || !strings.Contains(w.Message, "client id") {
			t.Fatalf("client id %.20q: error frame %+v, %v", id, w, err)
		}
	}

	// Acks: each bad one gets an error frame, and the connection goes on.
	ws := dial(t, f, `{"type":"hello","channel":"c","since":3}`, nil)
	if _, err := next(t, ws, "ready"); err != nil {
		t.Fatal(err)
	}
	for _, seq := range []string{`-1`, `18446744073709551615`, `1.5`, `"1"`, `null`} {
		_ = ws.Write(context.Background(), websocket.MessageText, []byte(`{"type":"ack","seq":`+seq+`}`))
		if w, err := next(t, ws, "error"); err != nil || w.Code != "bad_frame" || !strings.Contains(w.Message, "seq") {
			t.Fatalf("ack seq %s: error frame %+v, %v; want bad_frame naming seq", seq, w, err)
		}
	}
	appendN(t, f.srv, "c", 1)
	if w, err := next(t, ws, "event"); err != nil || w.Event.Seq != 4 {
		t.Fatalf("after bad acks: %+v, %v", w, err)
	}

	// A flood of bad frames ends the connection with 4400.
	for range 40 {
		_ = ws.Write(context.Background(), websocket.MessageText, []byte(`{"type":"ack","seq":-1}`))
	}
	if _, err := next(t, ws, "never"); websocket.CloseStatus(err) != stream.CloseBadHello {
		t.Fatalf("after a flood of bad frames: %v, want close %d", err, stream.CloseBadHello)
	}

	for _, q := range []string{"since=18446744073709551615", "since=-1", "since=abc", "since=1.0", "since=5", "since=1&since=2",
		"limit=0", "limit=-1", "limit=10001", "limit=99999999999999999999", "channel=d&channel=c"} {
		get(t, f.http.URL+"/events?channel=c&"+q, http.StatusBadRequest, nil)
	}
	get(t, f.http.URL+"/events?channel=c&since=4", http.StatusOK, nil)
}

// With Principal, acks are recorded per caller and client id: a hostile reader
// of a shared channel who sends another reader's client id moves its own row,
// never the other's.
func TestPrincipalScopesAcks(t *testing.T) {
	t.Parallel()
	f := newFixture(t, sqltest.SQLite(t), stream.ServerConfig{
		Heartbeat: 50 * time.Millisecond,
		Authorize: func(r *http.Request, channel string) error { return nil },
		Principal: func(r *http.Request) string { return r.Header.Get("X-User") },
	})
	appendN(t, f.srv, "news", 10)
	read := func(user string, since, ack int) {
		ws := dial(t, f, fmt.Sprintf(`{"type":"hello","channel":"news","since":%d,"client":"tab-1"}`, since), http.Header{"X-User": {user}})
		for {
			w, err := next(t, ws, "event")
			if err != nil {
				t.Fatal(err)
			}
			if w.Event.Seq == uint64(ack) {
				break
			}
		}
		_ = ws.Write(context.Background(), websocket.MessageText, []byte(fmt.Sprintf(`{"type":"ack","seq":%d}`, ack)))
		ws.Close(websocket.StatusNormalClosure, "")
	}
	rows := func() map[string]int64 {
		out := map[string]int64{}
		_ = f.db.InTx(context.Background(), func(tx *sql.Tx) error {
			rs, err := tx.Query(`SELECT client, seq FROM idem_stream_clients WHERE channel = 'news'`)
			if err != nil {
				return err
			}
			defer rs.Close()
			for rs.Next() {
				var c string
				var s int64
				_ = rs.Scan(&c, &s)
				out[c] = s
			}
			return rs.Err()
		})
		return out
	}
	read("alice", 0, 2)
	read("mallory", 9, 10)
	testsvc.Eventually(t, time.Minute, "both acks recorded", func() bool { r := rows(); return r["alice/tab-1"] == 2 && r["mallory/tab-1"] == 10 })
	if r := rows(); len(r) != 2 {
		t.Fatalf("ack rows %v, want alice/tab-1 at 2 and mallory/tab-1 at 10", r)
	}
}

// What a peer can make the server hold is bounded: sockets (MaxConnections),
// and the events of one GET /events answer (about 4 MiB of data, whatever the
// limit asked).
func TestServerBoundsWhatAPeerCanHold(t *testing.T) {
	t.Parallel()
	f := newFixture(t, sqltest.SQLite(t), stream.ServerConfig{AllowAnonymous: true, MaxConnections: 3, HandshakeTimeout: 200 * time.Millisecond})
	wsURL := "ws" + strings.TrimPrefix(f.http.URL, "http") + "/stream"
	// A peer that never says hello is closed after HandshakeTimeout.
	silent, _, err := websocket.Dial(context.Background(), wsURL, nil)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := next(t, silent, "never"); err == nil || time.Since(start) > 5*time.Second {
		t.Fatalf("a silent peer: %v after %v, want the connection closed after 200 ms", err, time.Since(start))
	}
	// A frame over 4 KiB ends the connection (1009, message too big).
	huge := dial(t, f, `{"type":"hello","channel":"c","client":"`+strings.Repeat("x", 5000)+`"}`, nil)
	if _, err := next(t, huge, "never"); websocket.CloseStatus(err) != websocket.StatusMessageTooBig {
		t.Fatalf("a 5 KB hello: %v, want close 1009", err)
	}
	for range 3 {
		ws := dial(t, f, `{"type":"hello","channel":"c"}`, nil)
		if _, err := next(t, ws, "ready"); err != nil {
			t.Fatal(err)
		}
	}
	_, resp, err := websocket.Dial(context.Background(), wsURL, nil)
	if err == nil || resp == nil || resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("a fourth socket over MaxConnections 3: %v, %v; want 503 with Retry-After", err, resp)
	}

	big := json.RawMessage(`"` + strings.Repeat("x", 50<<10) + `"`)
	for range 250 {
		if _, err := f.srv.Append(context.Background(), "big", stream.Event{Type: "t", Data: big}); err != nil {
			t.Fatal(err)
		}
	}
	var page struct {
		Head   uint64         `json:"head"`
		Events []stream.Event `json:"events"`
	}
	get(t, f.http.URL+"/events?channel=big&limit=10000", http.StatusOK, &page)
	if n := len(page.Events); n == 0 || n >= 250 || page.Events[n-1].Seq != uint64(n) || page.Head != 250 {
		t.Fatalf("GET /events of 250 events of 50 KiB: %d events (head %d); want a first page of about 4 MiB", n, page.Head)
	}
}
