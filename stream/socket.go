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
	if s.slots.full() {
		w.Header().Set("Retry-After", "5")
		problem(w, http.StatusServiceUnavailable, fmt.Sprintf("the server holds its maximum of %d connections: retry later", s.cfg.MaxConnections))
		return
	}
	ctx, cancel := context.WithCancelCause(r.Context())
	defer cancel(nil)
	// The socket waits for its hello in the pending pool, apart from the
	// admitted sockets' slots: it may evict the oldest one waiting.
	waiting := s.slots.wait(cancel)
	// Accept checks the Origin (403 for a foreign page) the way checkOrigin does.
	ws, err := websocket.Accept(w, r, &websocket.AcceptOptions{OriginPatterns: s.cfg.OriginPatterns})
	if err != nil {
		s.slots.done(waiting)
		return // Accept wrote the HTTP error
	}
	ws.SetReadLimit(maxFrame)
	hello, release, no := s.admit(ctx, r, ws)
	if evicted := !s.slots.done(waiting); evicted && no == nil { // while Authorize ran
		release()
		no = evictedRefusal(ctx)
	}
	if no != nil {
		s.refuse(ctx, ws, no)
		return
	}
	defer release()
	if hello.Client == "" { // an old client: its own ack row, for this connection
		hello.Client = "conn-" + randomID()
	}
	c := &client{ws: ws, wake: make(chan struct{}, 1), kicked: make(chan struct{}), sent: hello.Since, acked: hello.Since,
		flushed: hello.Since, id: s.ackRow(r, hello.Client), batch: hello.Batch}
	ch, err := s.join(ctx, hello.Channel, c)
	if err != nil {
		s.refuse(ctx, ws, &refusal{"unavailable", websocket.StatusTryAgainLater, err.Error()})
		return
	}
	defer s.active.Done() // Add is in join, under the lock that Close takes
	defer s.leave(hello.Channel, ch, c)
	if head := ch.head(); hello.Since > head {
		s.refuse(ctx, ws, &refusal{"bad_frame", CloseBadHello, fmt.Sprintf("since %d is past the channel's head %d: send the last seq you processed", hello.Since, head)})
		return
	}
	// The client is known from now on: Trim keeps what it has not acked, even if
	// it never acks (an ack of 0 never lowers a row, and refreshes it).
	if err := s.store.Ack(ctx, hello.Channel, c.id, 0); err != nil {
		s.refuse(ctx, ws, &refusal{"unavailable", websocket.StatusTryAgainLater, "store unavailable, retry"})
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
		cancel(nil)
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

// admit reads the socket's hello, authorizes it, and takes its slots (release gives
// them back), or says why not. A socket evicted from the pending pool, or waiting
// when the server closes, is refused with the cause of ctx.
func (s *Server) admit(ctx context.Context, r *http.Request, ws *websocket.Conn) (_ hello, release func(), _ *refusal) {
	h, err := s.readHello(ctx, ws)
	if no := evictedRefusal(ctx); no != nil {
		return h, nil, no
	}
	if err != nil {
		return h, nil, &refusal{"bad_frame", CloseBadHello, err.Error()}
	}
	if _, code, err := s.check(r, h.Channel); err != nil {
		status := map[string]websocket.StatusCode{"unknown_channel": CloseUnknown, "forbidden": CloseForbidden}[code]
		return h, nil, &refusal{code, status, err.Error()}
	}
	principal := ""
	if s.cfg.Principal != nil {
		principal = s.cfg.Principal(r)
	}
	release, no := s.slots.admit(principal)
	return h, release, no
}

// errClosed ends the hello wait of the sockets pending when the server closes.
var errClosed = errors.New("stream: the server is shutting down")

// evictedRefusal is the refusal of a socket whose hello wait ctx was ended by a
// newer socket (errEvicted) or by Close (errClosed), else nil.
func evictedRefusal(ctx context.Context) *refusal {
	if cause := context.Cause(ctx); errors.Is(cause, errEvicted) || errors.Is(cause, errClosed) {
		return &refusal{"evicted", websocket.StatusTryAgainLater, cause.Error() + ": retry"}
	}
	return nil
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

// refuse sends the error frame of no and closes the socket. An evicted socket is
// closed at once: it holds no slot any more, and must not hold a goroutine for the
// close handshake either.
func (s *Server) refuse(ctx context.Context, ws *websocket.Conn, no *refusal) {
	s.m.disconnects.WithLabelValues(no.code).Inc()
	if no.code == "evicted" {
		_ = ws.CloseNow()
		return
	}
	_ = write(ctx, ws, frame{Type: "error", Code: no.code, Message: no.msg})
	_ = ws.Close(no.status, truncate(no.msg, 120))
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
