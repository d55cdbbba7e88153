package stream_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/internal/sqltest"
	"github.com/idemhq/idem/internal/testsvc"
	"github.com/idemhq/idem/outbox"
	"github.com/idemhq/idem/stream"
	"github.com/idemhq/idem/stream/streamtest"
)

type fixture struct {
	reg   *prometheus.Registry
	srv   *stream.Server
	http  *httptest.Server
	store *stream.SQLStore[*sql.Tx]
	db    idemsql.TxDB[*sql.Tx]
}

func newFixture(t *testing.T, db idemsql.TxDB[*sql.Tx], cfg stream.ServerConfig) *fixture {
	t.Helper()
	store, err := stream.NewSQLStore(context.Background(), db, stream.SQLConfig{})
	if err != nil {
		t.Fatal(err)
	}
	f := serve(t, store, cfg)
	f.store, f.db = store, db
	return f
}

// sqlStore is a SQLStore with the default config on db, whose migrations it runs.
func sqlStore(t testing.TB, db idemsql.TxDB[*sql.Tx]) *stream.SQLStore[*sql.Tx] {
	t.Helper()
	s, err := stream.NewSQLStore(context.Background(), db, stream.SQLConfig{})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// serve runs a Server on store in an httptest.Server.
func serve(t *testing.T, store stream.Store, cfg stream.ServerConfig) *fixture {
	t.Helper()
	if cfg.Heartbeat == 0 {
		cfg.Heartbeat = time.Second
	}
	reg := prometheus.NewRegistry()
	cfg.Registerer = reg
	srv, err := stream.NewServer(store, cfg)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(func() { srv.Close(); hs.Close() })
	return &fixture{reg: reg, srv: srv, http: hs}
}

// appendN appends n events to channel.
func appendN(t *testing.T, srv *stream.Server, channel string, n int) {
	t.Helper()
	for i := range n {
		if _, err := srv.Append(context.Background(), channel, stream.Event{Type: "order.updated", ID: fmt.Sprint("o-", i),
			Data: json.RawMessage(fmt.Sprintf(`{"n":%d}`, i))}); err != nil {
			t.Fatal(err)
		}
	}
}

// A client that reconnects with its last seq gets the rest; REST returns the same
// events; an event without data is a hint; a keyed append is idempotent.
func TestReplayRESTHintsAndKeys(t *testing.T) {
	t.Parallel()
	sqltest.ForEachDialect(t, func(t *testing.T, db idemsql.TxDB[*sql.Tx]) {
		f := newFixture(t, db, stream.ServerConfig{AllowAnonymous: true})
		ctx := context.Background()
		appendN(t, f.srv, "c", 10)
		hint, err := f.srv.Append(ctx, "c", stream.Event{Type: "order.updated", ID: "o-99"})
		if err != nil || !hint.Hint() || hint.Seq != 11 {
			t.Fatalf("hint append: %+v, %v", hint, err)
		}
		k1, _ := f.srv.Append(ctx, "c", stream.Event{Type: "paid", ID: "o-1", Key: "msg-1"})
		k2, _ := f.srv.Append(ctx, "c", stream.Event{Type: "paid", ID: "o-1", Key: "msg-1"})
		if k1.Seq != 12 || k2.Seq != 12 {
			t.Fatalf("keyed appends got seqs %d and %d, want 12 twice", k1.Seq, k2.Seq)
		}

		var page struct {
			Head   uint64            `json:"head"`
			Events []json.RawMessage `json:"events"`
		}
		get(t, f.http.URL+"/events?channel=c&since=7", http.StatusOK, &page)
		if page.Head != 12 || len(page.Events) != 5 {
			t.Fatalf("REST since 7: head %d, %d events; want 12, 5", page.Head, len(page.Events))
		}
		if s := string(page.Events[3]); strings.Contains(s, `"data"`) || !strings.Contains(s, `"id":"o-99"`) {
			t.Fatalf("the hint is sent as %s, want type and id without data", s)
		}

		rec := &streamtest.Recorder{}
		ctx2, cancel := context.WithCancel(ctx)
		c, _ := stream.NewClient(stream.ClientConfig{URL: f.http.URL, Channel: "c", Since: 9, OnEvent: rec.OnEvent})
		go func() { _ = c.Run(ctx2) }()
		testsvc.Eventually(t, time.Minute, "replay", func() bool { return len(rec.Seqs()) == 3 })
		cancel()
		if got := rec.Seqs(); got[0] != 10 || got[2] != 12 {
			t.Fatalf("replay after 9: %v", got)
		}
	})
}

func get(t *testing.T, url string, status int, into any) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != status {
		t.Fatalf("GET %s: %d, want %d", url, resp.StatusCode, status)
	}
	if into != nil {
		if err := json.NewDecoder(resp.Body).Decode(into); err != nil {
			t.Fatal(err)
		}
	}
}

// dial opens a raw socket and sends hello.
func dial(t *testing.T, f *fixture, hello string, header http.Header) *websocket.Conn {
	t.Helper()
	ws, _, err := websocket.Dial(context.Background(), "ws"+strings.TrimPrefix(f.http.URL, "http")+"/stream", &websocket.DialOptions{HTTPHeader: header})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ws.CloseNow() })
	if err := ws.Write(context.Background(), websocket.MessageText, []byte(hello)); err != nil {
		t.Fatal(err)
	}
	return ws
}

type wire struct {
	Type    string        `json:"type"`
	Code    string        `json:"code"`
	Message string        `json:"message"`
	Event   *stream.Event `json:"event"`
}

// next reads frames until one of type typ (skipping heartbeats), or the close.
func next(t *testing.T, ws *websocket.Conn, typ string) (wire, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		_, data, err := ws.Read(ctx)
		if err != nil {
			return wire{}, err
		}
		var w wire
		if err := json.Unmarshal(data, &w); err != nil {
			t.Fatalf("frame %s: %v", data, err)
		}
		if w.Type == typ {
			return w, nil
		}
	}
}

// Bad input gets a clear error, and the server keeps serving everyone else.
func TestBadInputAndAuthorization(t *testing.T) {
	t.Parallel()
	f := newFixture(t, sqltest.SQLite(t), stream.ServerConfig{
		SendBuffer:   8,
		WriteTimeout: 300 * time.Millisecond,
		Channels:     func(c string) bool { return strings.HasPrefix(c, "user:") },
		Authorize: func(r *http.Request, channel string) error {
			if "user:"+r.Header.Get("X-User") != channel {
				return errors.New("you may read your own channel only")
			}
			return nil
		},
	})
	alice := http.Header{"X-User": {"alice"}}
	closeCode := func(err error) websocket.StatusCode { return websocket.CloseStatus(err) }

	for _, tc := range []struct {
		hello string
		code  string
		close websocket.StatusCode
	}{
		{`not json`, "bad_frame", stream.CloseBadHello},
		{`{"type":"ack","seq":1}`, "bad_frame", stream.CloseBadHello},
		{`{"type":"hello","channel":"user:bob"}`, "forbidden", stream.CloseForbidden},
		{`{"type":"hello","channel":"admin"}`, "unknown_channel", stream.CloseUnknown},
	} {
		ws := dial(t, f, tc.hello, alice)
		w, err := next(t, ws, "error")
		if err != nil || w.Code != tc.code || w.Message == "" {
			t.Fatalf("hello %s: error frame %+v, %v; want code %s with a message", tc.hello, w, err, tc.code)
		}
		if _, err := next(t, ws, "never"); closeCode(err) != tc.close {
			t.Fatalf("hello %s: closed with %v, want %d", tc.hello, err, tc.close)
		}
	}
	get(t, f.http.URL+"/events?channel=user:bob", http.StatusForbidden, nil) // no X-User: forbidden
	get(t, f.http.URL+"/events?channel=user:x&since=abc", http.StatusBadRequest, nil)

	// After hello: a malformed frame and an ack of an unsent seq get errors, and
	// the connection keeps delivering.
	appendN(t, f.srv, "user:alice", 3)
	ws := dial(t, f, `{"type":"hello","channel":"user:alice","since":0}`, alice)
	if _, err := next(t, ws, "ready"); err != nil {
		t.Fatal(err)
	}
	_ = ws.Write(context.Background(), websocket.MessageText, []byte(`{{{`))
	if w, err := next(t, ws, "error"); err != nil || w.Code != "bad_frame" {
		t.Fatalf("malformed frame: %+v, %v", w, err)
	}
	_ = ws.Write(context.Background(), websocket.MessageText, []byte(`{"type":"ack","seq":999}`))
	if w, err := next(t, ws, "error"); err != nil || w.Code != "bad_ack" {
		t.Fatalf("ack of an unsent seq: %+v, %v", w, err)
	}
	appendN(t, f.srv, "user:alice", 1)
	for {
		w, err := next(t, ws, "event")
		if err != nil {
			t.Fatalf("the connection stopped delivering after bad input: %v", err)
		}
		if w.Event.Seq == 4 {
			break
		}
	}

	// A slow consumer: a client that reads but does not ack fills its window (8)
	// and is disconnected with 4408 and a reason; the server keeps serving others.
	slow := dial(t, f, `{"type":"hello","channel":"user:alice","since":4}`, alice)
	if _, err := next(t, slow, "ready"); err != nil {
		t.Fatal(err)
	}
	appendN(t, f.srv, "user:alice", 40)
	if w, err := next(t, slow, "error"); err != nil || w.Code != "slow_consumer" {
		t.Fatalf("slow consumer: %+v, %v", w, err)
	}
	if _, err := next(t, slow, "never"); closeCode(err) != stream.CloseSlowConsumer {
		t.Fatalf("slow consumer closed with %v, want %d", err, stream.CloseSlowConsumer)
	}
	rec := &streamtest.Recorder{}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c, _ := stream.NewClient(stream.ClientConfig{URL: f.http.URL, Channel: "user:alice", Header: alice, OnEvent: rec.OnEvent})
	go func() { _ = c.Run(ctx) }()
	testsvc.Eventually(t, time.Minute, "a healthy client after the slow one", func() bool { return len(rec.Seqs()) == 44 })
}

// Acked events are trimmed, and so are events past the retention; a client behind
// the trim is told to reload (REST 410).
func TestTrim(t *testing.T) {
	t.Parallel()
	sqltest.ForEachDialect(t, func(t *testing.T, db idemsql.TxDB[*sql.Tx]) {
		f := newFixture(t, db, stream.ServerConfig{AllowAnonymous: true})
		ctx := context.Background()
		appendN(t, f.srv, "c", 10)
		if err := f.store.Ack(ctx, "c", "phone", 6); err != nil {
			t.Fatal(err)
		}
		if err := f.store.Ack(ctx, "c", "laptop", 4); err != nil {
			t.Fatal(err)
		}
		n, err := f.store.Trim(ctx, time.Hour)
		if err != nil || n != 4 {
			t.Fatalf("Trim = %d, %v; want the 4 events both clients acked", n, err)
		}
		if _, err := f.store.Read(ctx, "c", 2, 10); !errors.Is(err, stream.ErrTrimmed) {
			t.Fatalf("Read behind the trim: %v, want ErrTrimmed", err)
		}
		get(t, f.http.URL+"/events?channel=c&since=2", http.StatusGone, nil)
		if evs, err := f.store.Read(ctx, "c", 4, 10); err != nil || len(evs) != 6 {
			t.Fatalf("Read after the trim point: %d events, %v", len(evs), err)
		}
		if n, err := f.store.Trim(ctx, -time.Hour); err != nil || n != 6 {
			t.Fatalf("Trim past retention = %d, %v; want the 6 left", n, err)
		}
	})
}

// The outbox relay feeds a stream: events committed with the business write reach
// the client, once, even when the relay republishes.
func TestOutboxRelayFeedsTheStream(t *testing.T) {
	t.Parallel()
	sqltest.ForEachDialect(t, func(t *testing.T, db idemsql.TxDB[*sql.Tx]) {
		f := newFixture(t, db, stream.ServerConfig{AllowAnonymous: true})
		ctx := context.Background()
		ob, err := outbox.New(ctx, db, outbox.Config{})
		if err != nil {
			t.Fatal(err)
		}
		for i := range 5 {
			if err := db.InTx(ctx, func(tx *sql.Tx) error {
				_, err := ob.EnqueueTx(ctx, tx, idem.Message{ID: fmt.Sprint("m", i), Topic: "user:7",
					Headers: map[string]string{stream.HeaderEventType: "order.placed"}, Payload: []byte(fmt.Sprintf(`{"n":%d}`, i))})
				return err
			}); err != nil {
				t.Fatal(err)
			}
		}
		sink := stream.Sink{Server: f.srv}
		// A relay that crashed after publishing republishes: the keys keep it once.
		if err := sink.Publish(ctx, idem.Message{ID: "m0", Topic: "user:7", Payload: []byte(`{"n":0}`)}); err != nil {
			t.Fatal(err)
		}
		relay, err := ob.Relay(sink, outbox.RelayConfig{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := relay.RunOnce(ctx); err != nil {
			t.Fatal(err)
		}
		rec := &streamtest.Recorder{}
		cctx, cancel := context.WithCancel(ctx)
		defer cancel()
		c, _ := stream.NewClient(stream.ClientConfig{URL: f.http.URL, Channel: "user:7", OnEvent: rec.OnEvent})
		go func() { _ = c.Run(cctx) }()
		testsvc.Eventually(t, time.Minute, "the relayed events", func() bool { return len(rec.Seqs()) == 5 })
		// Nothing more can arrive: the republish added no event, and the client
		// holds every event of the channel.
		if head, err := f.store.Head(ctx, "user:7"); err != nil || head != 5 {
			t.Fatalf("head after the republish = %d, %v; want 5", head, err)
		}
		streamtest.CheckSeqs(t, "client", rec.Seqs(), 5)
	})
}

// metric reads a counter of the fixture's registry by its "reason" label.
func (f *fixture) metric(name, reason string) float64 {
	mfs, _ := f.reg.Gather()
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "reason" && l.GetValue() == reason {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// A client's acks reach the store (at a heartbeat or when it leaves), so what it
// processed can be trimmed.
func TestAcksReachTheStore(t *testing.T) {
	t.Parallel()
	sqltest.ForEachDialect(t, func(t *testing.T, db idemsql.TxDB[*sql.Tx]) {
		f := newFixture(t, db, stream.ServerConfig{AllowAnonymous: true, Heartbeat: 100 * time.Millisecond})
		appendN(t, f.srv, "c", 10)
		rec := &streamtest.Recorder{}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		c, _ := stream.NewClient(stream.ClientConfig{URL: f.http.URL, Channel: "c", ID: "phone", OnEvent: rec.OnEvent})
		go func() { _ = c.Run(ctx) }()
		testsvc.Eventually(t, time.Minute, "the events", func() bool { return len(rec.Seqs()) == 10 })
		trimmed := 0
		testsvc.Eventually(t, time.Minute, "the acks to reach the store", func() bool {
			n, err := f.store.Trim(context.Background(), time.Hour)
			if err != nil {
				t.Fatal(err)
			}
			trimmed += n
			return trimmed == 10
		})
	})
}

// Two readers of one channel, each with the default client id: the fast one
// acks everything and Trim runs; the slow one, which stopped early, still gets
// every event when it resumes (each reader has its own ack row, and a reader is
// known from the moment it connects).
func TestTrimWaitsForTheSlowReader(t *testing.T) {
	t.Parallel()
	sqltest.ForEachDialect(t, func(t *testing.T, db idemsql.TxDB[*sql.Tx]) {
		f := newFixture(t, db, stream.ServerConfig{AllowAnonymous: true, Heartbeat: 100 * time.Millisecond})
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		appendN(t, f.srv, "c", 20)

		stop := errors.New("the slow reader stops")
		slowRec := &streamtest.Recorder{}
		slow, _ := stream.NewClient(stream.ClientConfig{URL: f.http.URL, Channel: "c", OnEvent: func(e stream.Event) error {
			if e.Seq > 3 {
				return stop
			}
			return slowRec.OnEvent(e)
		}})
		if err := slow.Run(ctx); !errors.Is(err, stop) {
			t.Fatalf("slow Run = %v, want it stopped by OnEvent", err)
		}

		fastRec := &streamtest.Recorder{}
		fast, _ := stream.NewClient(stream.ClientConfig{URL: f.http.URL, Channel: "c", OnEvent: fastRec.OnEvent})
		fctx, fcancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { defer close(done); _ = fast.Run(fctx) }()
		testsvc.Eventually(t, time.Minute, "the fast reader", func() bool { return len(fastRec.Seqs()) == 20 })
		testsvc.Eventually(t, time.Minute, "the fast reader's ack to reach the store (at a heartbeat)", func() bool {
			var acked int64
			_ = f.db.InTx(ctx, func(tx *sql.Tx) error {
				return tx.QueryRowContext(ctx, `SELECT COALESCE(MAX(seq), 0) FROM idem_stream_clients WHERE channel = 'c'`).Scan(&acked)
			})
			return acked == 20
		})
		fcancel()
		<-done
		if _, err := f.store.Trim(ctx, time.Hour); err != nil {
			t.Fatal(err)
		}

		// The slow reader resumes where it stopped: nothing was trimmed under it.
		var trimmed error
		slow2, _ := stream.NewClient(stream.ClientConfig{URL: f.http.URL, Channel: "c", ID: slow.ID(), Since: slow.LastSeq(),
			OnEvent: slowRec.OnEvent, OnDisconnect: func(err error) { trimmed = err }})
		sctx, scancel := context.WithCancel(ctx)
		defer scancel()
		errc := make(chan error, 1)
		go func() { errc <- slow2.Run(sctx) }()
		testsvc.Eventually(t, time.Minute, "the slow reader's replay", func() bool { return len(slowRec.Seqs()) == 20 || len(errc) > 0 })
		scancel()
		if err := <-errc; !errors.Is(err, context.Canceled) {
			t.Fatalf("slow reader: %v (last disconnect: %v), want every event on replay", err, trimmed)
		}
		streamtest.CheckSeqs(t, "slow reader", slowRec.Seqs(), 20)
		if fast.ID() == slow.ID() || fast.ID() == "" {
			t.Fatalf("default client ids %q and %q: want two distinct ids", fast.ID(), slow.ID())
		}
	})
}
