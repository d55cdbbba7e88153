package stream

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/coder/websocket"
)

type client struct {
	ws      *websocket.Conn
	wake    chan struct{}
	kicked  chan struct{}
	kickOne sync.Once
	reason  string
	code    websocket.StatusCode
	mu      sync.Mutex
	sent    uint64
	acked   uint64
	flushed uint64    // the ack last written to the store
	id      string    // the client's ack row: its id, scoped by its principal
	seen    time.Time // when the ack row was last written
	batch   bool      // it asked for "events" frames in its hello
}

func (c *client) kick(code websocket.StatusCode, reason string) {
	c.kickOne.Do(func() {
		c.code, c.reason = code, reason
		close(c.kicked)
	})
}

// frame is every message on the socket, both ways.
type frame struct {
	Type    string  `json:"type"`
	Channel string  `json:"channel,omitempty"`
	Since   uint64  `json:"since,omitempty"`
	Client  string  `json:"client,omitempty"`
	Seq     uint64  `json:"seq,omitempty"`
	Head    *uint64 `json:"head,omitempty"`
	Window  int     `json:"window,omitempty"`
	Event   *Event  `json:"event,omitempty"`
	Events  []Event `json:"events,omitempty"` // read by Client; the server writes "events" frames itself (eventsFrame)
	Batch   bool    `json:"batch,omitempty"`
	Code    string  `json:"code,omitempty"`
	Message string  `json:"message,omitempty"`
}

func (s *Server) serveSocket(w http.ResponseWriter, r *http.Request) {
	if n := s.conns.Add(1); s.cfg.MaxConnections > 0 && n > int64(s.cfg.MaxConnections) {
		s.conns.Add(-1)
		w.Header().Set("Retry-After", "5")
		problem(w, http.StatusServiceUnavailable, fmt.Sprintf("the server holds its maximum of %d connections: retry later", s.cfg.MaxConnections))
		return
	}
	defer s.conns.Add(-1)
	// Accept checks the Origin (403 for a foreign page) the way checkOrigin does.
	ws, err := websocket.Accept(w, r, &websocket.AcceptOptions{OriginPatterns: s.cfg.OriginPatterns})
	if err != nil {
		return // Accept wrote the HTTP error
	}
	ws.SetReadLimit(maxFrame)
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()

	hello, err := s.readHello(ctx, ws)
	if err != nil {
		s.refuse(ctx, ws, "bad_frame", CloseBadHello, err.Error())
		return
	}
	if _, code, err := s.check(r, hello.Channel); err != nil {
		status := map[string]websocket.StatusCode{"unknown_channel": CloseUnknown, "forbidden": CloseForbidden}[code]
		s.refuse(ctx, ws, code, status, err.Error())
		return
	}
	if hello.Client == "" { // an old client: its own ack row, for this connection
		hello.Client = "conn-" + randomID()
	}
	c := &client{ws: ws, wake: make(chan struct{}, 1), kicked: make(chan struct{}), sent: hello.Since, acked: hello.Since,
		flushed: hello.Since, id: s.ackRow(r, hello.Client), batch: hello.Batch}
	ch, err := s.join(ctx, hello.Channel, c)
	if err != nil {
		s.refuse(ctx, ws, "unavailable", websocket.StatusTryAgainLater, err.Error())
		return
	}
	defer s.active.Done() // Add is in join, under the lock that Close takes
	defer s.leave(hello.Channel, ch, c)
	if head := ch.head(); hello.Since > head {
		s.refuse(ctx, ws, "bad_frame", CloseBadHello, fmt.Sprintf("since %d is past the channel's head %d: send the last seq you processed", hello.Since, head))
		return
	}
	// The client is known from now on: Trim keeps what it has not acked, even if
	// it never acks (an ack of 0 never lowers a row, and refreshes it).
	if err := s.store.Ack(ctx, hello.Channel, c.id, 0); err != nil {
		s.refuse(ctx, ws, "unavailable", websocket.StatusTryAgainLater, "store unavailable, retry")
		return
	}
	c.seen = time.Now()
	s.m.clients.Inc()
	defer s.m.clients.Dec()

	if err := write(ctx, ws, frame{Type: "ready", Channel: hello.Channel, Client: hello.Client, Head: ptr(ch.head()), Window: s.cfg.SendBuffer}); err != nil {
		return
	}
	readerDone := make(chan struct{})
	go func() {
		defer close(readerDone)
		s.readAcks(ctx, ws, c)
		cancel()
	}()
	reason := s.writeLoop(ctx, hello.Channel, ch, c)
	s.leave(hello.Channel, ch, c) // before the close handshake, which can take a while
	s.m.disconnects.WithLabelValues(reason.label).Inc()
	if reason.code != 0 {
		_ = ws.Close(reason.code, reason.text)
	} else {
		_ = ws.CloseNow()
	}
	<-readerDone
	s.flushAck(context.WithoutCancel(r.Context()), hello.Channel, c, false)
	c.mu.Lock()
	s.m.unacked.Sub(float64(c.sent - min(c.acked, c.sent)))
	c.mu.Unlock()
}

type closeReason struct {
	label string
	code  websocket.StatusCode
	text  string
}

func (s *Server) readHello(ctx context.Context, ws *websocket.Conn) (hello, error) {
	rctx, cancel := context.WithTimeout(ctx, s.cfg.HandshakeTimeout)
	defer cancel()
	_, data, err := ws.Read(rctx)
	if err != nil {
		return hello{}, fmt.Errorf("no hello within %v: %w", s.cfg.HandshakeTimeout, err)
	}
	return parseHello(data)
}

func randomID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func (s *Server) refuse(ctx context.Context, ws *websocket.Conn, code string, status websocket.StatusCode, msg string) {
	s.m.disconnects.WithLabelValues(code).Inc()
	_ = write(ctx, ws, frame{Type: "error", Code: code, Message: msg})
	_ = ws.Close(status, truncate(msg, 120))
}

func (s *Server) reasonFor(ctx context.Context, c *client, err error) closeReason {
	select {
	case <-c.kicked:
		return closeReason{"kicked", c.code, c.reason}
	default:
	}
	if ctx.Err() != nil {
		return closeReason{"client_gone", 0, ""}
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return closeReason{"slow_consumer", CloseSlowConsumer, "slow consumer: write timed out"}
	}
	return closeReason{"write_error", 0, ""}
}

// write sends one frame, bounded by the write timeout: a client that does not
// read is a slow consumer.
func write(ctx context.Context, ws *websocket.Conn, f frame) error {
	return writeWithin(ctx, ws, f, defaultWriteTimeout)
}

func writeWithin(ctx context.Context, ws *websocket.Conn, f frame, timeout time.Duration) error {
	data, err := json.Marshal(f)
	if err != nil {
		return err
	}
	return writeRaw(ctx, ws, data, timeout)
}

func writeRaw(ctx context.Context, ws *websocket.Conn, data []byte, timeout time.Duration) error {
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return ws.Write(wctx, websocket.MessageText, data)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}

func ptr[T any](v T) *T { return &v }
