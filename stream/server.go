package stream

import (
	"context"
	"crypto/rand"
	_ "embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"path"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemhq/idem"
)

//go:embed js/idem-stream.js
var jsClient []byte

// WebSocket close codes the server uses, with a reason text.
const (
	CloseBadHello           websocket.StatusCode = 4400 // bad input: the first frame was not a valid hello, or too many bad frames
	CloseForbidden          websocket.StatusCode = 4403 // Authorize refused the channel
	CloseUnknown            websocket.StatusCode = 4404 // Channels does not know the channel
	CloseSlowConsumer       websocket.StatusCode = 4408 // the client did not keep up
	CloseTrimmed            websocket.StatusCode = 4409 // events after the client's seq were trimmed: reload
	CloseKicked             websocket.StatusCode = 4410 // Kick, or the server shutting down
	DefaultHeartbeat                             = 15 * time.Second
	DefaultSendBuffer                            = 1024
	DefaultHandshakeTimeout                      = 10 * time.Second
	DefaultMaxConnections                        = 10000
	defaultWriteTimeout                          = 10 * time.Second
)

// ServerConfig configures a Server. Authorize (or AllowAnonymous) must be set;
// every other field has a default.
type ServerConfig struct {
	// Authorize decides whether the caller of r may read channel (never another
	// user's events). An error refuses it: 403 on REST, close 4403 on the socket,
	// with the error's text as the reason. It is required unless AllowAnonymous
	// is set: NewServer refuses a server with neither.
	Authorize func(r *http.Request, channel string) error
	// AllowAnonymous, with Authorize nil, lets every caller read every channel,
	// over the socket and GET /events: for public channels only. Without it, a
	// nil Authorize is a configuration error, not an open server.
	AllowAnonymous bool
	// OriginPatterns lists the browser origins, besides the server's own host,
	// whose pages may open the socket and read GET /events (host patterns matched
	// with path.Match, e.g. "app.example.com" or "*.example.com"; a pattern with
	// "://" is matched against scheme://host). A request with any other Origin
	// header is refused with 403, so a foreign page cannot ride the user's
	// cookies (cross-site WebSocket hijacking). Requests without an Origin
	// (non-browser clients) are not affected. The server never sends CORS
	// headers.
	OriginPatterns []string
	// Principal, if set, names the authenticated caller of r (a user id). Acks
	// are then recorded per principal and client id, so a caller who learns
	// another's client id cannot move that client's acks. Nil: acks are recorded
	// per client id alone (random UUIDs in the Go and JavaScript clients).
	Principal func(r *http.Request) string
	// Channels reports whether a channel exists. Nil: every valid name does.
	Channels func(channel string) bool
	// Heartbeat is how often the server sends a heartbeat frame (with the head) and
	// pings the client; a client that does not answer a ping within it is
	// disconnected. Default DefaultHeartbeat.
	Heartbeat time.Duration
	// SendBuffer is each client's window: how many events it may have received and
	// not yet acknowledged. A client whose window stays full for WriteTimeout is a
	// slow consumer and is disconnected with 4408 (it reconnects and catches up from
	// the store). It also bounds the events kept in memory per channel. The ready
	// frame tells the client its window, so it can ack in time. Default
	// DefaultSendBuffer.
	SendBuffer int
	// MaxConnections bounds the sockets open at once: the handshake of one more is
	// refused with 503 and Retry-After. Zero means DefaultMaxConnections (about 400
	// MiB of connection state at the measured ~40 KiB each); negative means no bound
	// (bound the listener or the proxy in front instead).
	MaxConnections int
	// HandshakeTimeout bounds the wait for the hello frame after the WebSocket
	// handshake. Default DefaultHandshakeTimeout. (The HTTP handshake itself is
	// bounded by the http.Server's ReadHeaderTimeout.)
	HandshakeTimeout time.Duration
	// WriteTimeout bounds one frame's write and the wait for an ack when a client's
	// window is full: a client that neither reads nor acks for this long is a slow
	// consumer and is disconnected. Default 10 s.
	WriteTimeout time.Duration
	// PollInterval, if positive, makes the server look for events appended to the
	// store by other processes (not through Append) this often. Zero: only Append
	// wakes clients.
	PollInterval time.Duration
	// Registerer receives idem_stream_clients, idem_stream_events_sent_total,
	// idem_stream_unacked (events sent and not yet acknowledged, summed over
	// clients) and idem_stream_disconnects_total{reason}.
	Registerer prometheus.Registerer
	Logger     *slog.Logger
}

// Server pushes channels' events to WebSocket clients: replay after the client's
// last seq, then live, in seq order, with acks and heartbeats; and the same events
// over REST (GET /events), the truth when the socket lies. See the package docs.
type Server struct {
	store Store
	cfg   ServerConfig
	m     *streamMetrics

	conns    atomic.Int64 // sockets open, for MaxConnections
	mu       sync.Mutex
	channels map[string]*channel
	closed   bool
	done     chan struct{}
	wg       sync.WaitGroup // the poller
	active   sync.WaitGroup // connections, so Close returns after their last ack flush
}

// channel is the live state of one channel with subscribers: the newest events
// (for delivery without a store read), the highest seq known, and the clients.
type channel struct {
	mu      sync.Mutex
	tail    map[uint64]cached
	max     uint64
	clients map[*client]struct{}
}

// cached is an event in a channel's tail with its event frame, encoded once for
// every client.
type cached struct {
	e     Event
	frame []byte
}

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
}

func (c *client) kick(code websocket.StatusCode, reason string) {
	c.kickOne.Do(func() {
		c.code, c.reason = code, reason
		close(c.kicked)
	})
}

// NewServer returns a server on store.
func NewServer(store Store, cfg ServerConfig) (*Server, error) {
	if store == nil {
		return nil, &idem.InputError{Field: "store", Reason: "is nil", Fix: "pass a stream.Store, e.g. NewSQLStore"}
	}
	if cfg.Authorize == nil && !cfg.AllowAnonymous {
		return nil, &idem.InputError{Field: "ServerConfig.Authorize", Reason: "is nil and AllowAnonymous is false",
			Fix: "set Authorize to check that the caller may read the channel, or AllowAnonymous: true if every channel is public"}
	}
	for _, p := range cfg.OriginPatterns {
		if _, err := path.Match(p, ""); err != nil || p == "" {
			return nil, &idem.InputError{Field: "ServerConfig.OriginPatterns", Reason: fmt.Sprintf("has a bad pattern %q", p),
				Fix: `list hosts such as "app.example.com" or "*.example.com"`}
		}
	}
	if cfg.Heartbeat <= 0 {
		cfg.Heartbeat = DefaultHeartbeat
	}
	if cfg.HandshakeTimeout <= 0 {
		cfg.HandshakeTimeout = DefaultHandshakeTimeout
	}
	if cfg.MaxConnections == 0 {
		cfg.MaxConnections = DefaultMaxConnections
	}
	if cfg.SendBuffer <= 0 {
		cfg.SendBuffer = DefaultSendBuffer
	}
	if cfg.WriteTimeout <= 0 {
		cfg.WriteTimeout = defaultWriteTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	m, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, err
	}
	s := &Server{store: store, cfg: cfg, m: m, channels: map[string]*channel{}, done: make(chan struct{})}
	if cfg.PollInterval > 0 {
		s.wg.Go(s.poll)
	}
	return s, nil
}

// Append stores e on channel and wakes the channel's clients. It returns the
// event as stored, with its seq.
func (s *Server) Append(ctx context.Context, channelName string, e Event) (Event, error) {
	e, err := s.store.Append(ctx, channelName, e)
	if err != nil {
		return e, err
	}
	s.Notify(channelName, e)
	return e, nil
}

// Notify tells the server that e was appended to channel by someone else (an
// AppendTx that committed): its clients are woken to receive it.
func (s *Server) Notify(channelName string, e Event) {
	s.mu.Lock()
	ch := s.channels[channelName]
	s.mu.Unlock()
	if ch == nil {
		return
	}
	ch.mu.Lock()
	if e.Seq > 0 {
		data, _ := json.Marshal(frame{Type: "event", Event: &e})
		ch.tail[e.Seq] = cached{e, data}
		ch.max = max(ch.max, e.Seq)
		for len(ch.tail) > s.cfg.SendBuffer {
			for seq := range ch.tail {
				if seq+uint64(s.cfg.SendBuffer) <= ch.max {
					delete(ch.tail, seq)
				}
			}
		}
	}
	clients := make([]*client, 0, len(ch.clients))
	for c := range ch.clients {
		clients = append(clients, c)
	}
	ch.mu.Unlock()
	for _, c := range clients {
		select {
		case c.wake <- struct{}{}:
		default:
		}
	}
}

// Kick disconnects every client of channel (close 4410); they reconnect and
// resume after their last seq. It returns how many it disconnected.
func (s *Server) Kick(channelName string) int {
	s.mu.Lock()
	ch := s.channels[channelName]
	s.mu.Unlock()
	if ch == nil {
		return 0
	}
	ch.mu.Lock()
	defer ch.mu.Unlock()
	for c := range ch.clients {
		c.kick(CloseKicked, "kicked by the server")
	}
	return len(ch.clients)
}

// Close disconnects every client, waits for their connections to end (their last
// acks recorded) and stops the server.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	close(s.done)
	chans := make([]*channel, 0, len(s.channels))
	for _, ch := range s.channels {
		chans = append(chans, ch)
	}
	s.mu.Unlock()
	for _, ch := range chans {
		ch.mu.Lock()
		for c := range ch.clients {
			c.kick(CloseKicked, "server shutting down")
		}
		ch.mu.Unlock()
	}
	s.wg.Wait()
	s.active.Wait()
	return nil
}

// Handler serves GET /stream (the WebSocket), GET /events (REST catch-up) and
// GET /idem-stream.js (the JavaScript client).
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /stream", s.serveSocket)
	mux.HandleFunc("GET /events", s.serveEvents)
	mux.HandleFunc("GET /idem-stream.js", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/javascript; charset=utf-8")
		w.Header().Set("Cache-Control", "no-cache")
		_, _ = w.Write(jsClient)
	})
	return mux
}

// checkOrigin refuses a browser request from a page of another origin than the
// server's host and OriginPatterns: the rule websocket.Accept applies to the
// socket, applied to GET /events too.
func (s *Server) checkOrigin(r *http.Request) error {
	origin := r.Header.Get("Origin")
	if origin == "" {
		return nil
	}
	u, err := url.Parse(origin)
	if err != nil || u.Host == "" {
		return fmt.Errorf("Origin %.80q is not a URL with a host", origin)
	}
	if strings.EqualFold(u.Host, r.Host) {
		return nil
	}
	for _, p := range s.cfg.OriginPatterns {
		target := u.Host
		if strings.Contains(p, "://") {
			target = u.Scheme + "://" + u.Host
		}
		if ok, _ := path.Match(strings.ToLower(p), strings.ToLower(target)); ok {
			return nil
		}
	}
	return fmt.Errorf("Origin %.80q may not read this server's streams: add it to ServerConfig.OriginPatterns if it should", origin)
}

// check authorizes and finds channel (already validated) for a caller.
func (s *Server) check(r *http.Request, channelName string) (status int, code string, err error) {
	if s.cfg.Channels != nil && !s.cfg.Channels(channelName) {
		return http.StatusNotFound, "unknown_channel", fmt.Errorf("no channel %q", channelName)
	}
	if s.cfg.Authorize != nil {
		if err := s.cfg.Authorize(r, channelName); err != nil {
			return http.StatusForbidden, "forbidden", err
		}
	}
	return 0, "", nil
}

// GET /events?channel=C&since=N&limit=L
func (s *Server) serveEvents(w http.ResponseWriter, r *http.Request) {
	if err := s.checkOrigin(r); err != nil {
		problem(w, http.StatusForbidden, err.Error())
		return
	}
	q, err := parseEventsQuery(r.URL.Query())
	if err != nil {
		problem(w, http.StatusBadRequest, err.Error())
		return
	}
	channelName, since := q.Channel, q.Since
	if status, _, err := s.check(r, channelName); err != nil {
		problem(w, status, "channel: "+err.Error())
		return
	}
	head, err := s.store.Head(r.Context(), channelName)
	if err != nil {
		problem(w, http.StatusServiceUnavailable, err.Error())
		return
	}
	if since > head {
		problem(w, http.StatusBadRequest, fmt.Sprintf("since %d is past the channel's head %d: pass the last seq the client processed", since, head))
		return
	}
	events, err := s.readPage(r.Context(), channelName, since, q.Limit)
	if errors.Is(err, ErrTrimmed) {
		problem(w, http.StatusGone, fmt.Sprintf("events after seq %d were trimmed: reload the state and start from the head", since))
		return
	}
	if err != nil {
		problem(w, http.StatusServiceUnavailable, err.Error())
		return
	}
	if n := len(events); n > 0 {
		head = max(head, events[n-1].Seq)
	}
	if events == nil {
		events = []Event{}
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"channel": channelName, "head": head, "events": events})
}

// Bounds of one GET /events answer: it is read from the store in chunks of
// eventsChunk events and ends after the chunk that reaches eventsBytes of
// event data, so a request for 10000 large events does not hold them all. The
// clients ask again from the last seq they got.
const (
	eventsChunk = 100
	eventsBytes = 4 << 20
)

// readPage reads up to limit events after since, in chunks, stopping early
// once eventsBytes of data are read.
func (s *Server) readPage(ctx context.Context, name string, since uint64, limit int) ([]Event, error) {
	var out []Event
	size := 0
	for len(out) < limit && size < eventsBytes {
		want := min(limit-len(out), eventsChunk)
		page, err := s.store.Read(ctx, name, since, want)
		if err != nil {
			if len(out) > 0 { // trimmed or failed after the first chunk: send what was read
				return out, nil
			}
			return nil, err
		}
		for _, e := range page {
			out = append(out, e)
			size += len(e.Data) + len(e.Type) + len(e.ID)
		}
		if len(page) < want {
			break
		}
		since = page[len(page)-1].Seq
	}
	return out, nil
}

func problem(w http.ResponseWriter, status int, detail string) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"type": "about:blank", "title": http.StatusText(status), "status": status, "detail": detail})
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
		flushed: hello.Since, id: s.ackRow(r, hello.Client)}
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

// ackRow is the name of a client's ack row: its id, scoped by its principal.
func (s *Server) ackRow(r *http.Request, id string) string {
	if s.cfg.Principal == nil {
		return id
	}
	return s.cfg.Principal(r) + "/" + id
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

// join registers c on channel, creating its live state from the store's head.
func (s *Server) join(ctx context.Context, name string, c *client) (*channel, error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, errors.New("server closed")
	}
	ch := s.channels[name]
	if ch == nil {
		ch = &channel{tail: map[uint64]cached{}, clients: map[*client]struct{}{}}
		s.channels[name] = ch
	}
	ch.mu.Lock()
	ch.clients[c] = struct{}{}
	ch.mu.Unlock()
	s.active.Add(1)
	s.mu.Unlock()
	head, err := s.store.Head(ctx, name)
	if err != nil {
		s.leave(name, ch, c)
		s.active.Done()
		return nil, err
	}
	ch.mu.Lock()
	ch.max = max(ch.max, head)
	ch.mu.Unlock()
	return ch, nil
}

func (s *Server) leave(name string, ch *channel, c *client) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ch.mu.Lock()
	delete(ch.clients, c)
	empty := len(ch.clients) == 0
	ch.mu.Unlock()
	if empty && s.channels[name] == ch {
		delete(s.channels, name)
	}
}

func (ch *channel) head() uint64 {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	return ch.max
}

// next returns the events from seq on that are in memory, contiguous, up to n,
// and the highest seq known.
func (ch *channel) next(seq uint64, n int) ([]cached, uint64) {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	var out []cached
	for len(out) < n {
		e, ok := ch.tail[seq]
		if !ok {
			break
		}
		out = append(out, e)
		seq++
	}
	return out, ch.max
}

// writeLoop sends c the events after its seq, in order, no more than its window
// ahead of its acks, until it must stop.
func (s *Server) writeLoop(ctx context.Context, name string, ch *channel, c *client) closeReason {
	heartbeat := time.NewTicker(s.cfg.Heartbeat)
	defer heartbeat.Stop()
	var full *time.Timer // running while the window is full
	defer func() {
		if full != nil {
			full.Stop()
		}
	}()
	for {
		c.mu.Lock()
		next, inflight := c.sent+1, c.sent-min(c.acked, c.sent)
		c.mu.Unlock()
		room := s.cfg.SendBuffer - int(inflight)
		var batch []cached
		var head uint64
		if room > 0 {
			if full != nil {
				full.Stop()
				full = nil
			}
			batch, head = ch.next(next, min(room, 64))
			if len(batch) == 0 && next <= head {
				events, err := s.store.Read(ctx, name, next-1, min(room, 64))
				for _, e := range events {
					batch = append(batch, cached{e: e})
				}
				if errors.Is(err, ErrTrimmed) {
					_ = write(ctx, c.ws, frame{Type: "error", Code: "trimmed", Message: fmt.Sprintf("events after seq %d were trimmed: reload the state and start from the head", next-1)})
					return closeReason{"trimmed", CloseTrimmed, "events were trimmed: reload"}
				}
				if err != nil {
					if ctx.Err() != nil {
						return closeReason{"client_gone", 0, ""}
					}
					s.cfg.Logger.Warn("stream: read failed", "channel", name, "err", err)
					return closeReason{"store_error", websocket.StatusTryAgainLater, "store unavailable, retry"}
				}
			}
		} else if full == nil {
			full = time.NewTimer(s.cfg.WriteTimeout)
		}
		for i := range batch {
			select {
			case <-c.kicked: // a steady flow of events must not delay a kick
				return closeReason{"kicked", c.code, c.reason}
			default:
			}
			data := batch[i].frame
			if data == nil {
				data, _ = json.Marshal(frame{Type: "event", Event: &batch[i].e})
			}
			// sent moves before the write: a fast client may ack the event before
			// the write returns, and that ack must not be refused as bad_ack.
			c.mu.Lock()
			c.sent = batch[i].e.Seq
			s.m.unacked.Inc()
			c.mu.Unlock()
			if err := writeRaw(ctx, c.ws, data, s.cfg.WriteTimeout); err != nil {
				return s.reasonFor(ctx, c, err)
			}
			s.m.sent.Inc()
		}
		if len(batch) > 0 {
			continue
		}
		var timeout <-chan time.Time
		if full != nil {
			timeout = full.C
		}
		select {
		case <-c.wake:
		case <-c.kicked:
			return closeReason{"kicked", c.code, c.reason}
		case <-ctx.Done():
			return closeReason{"client_gone", 0, ""}
		case <-timeout:
			_ = write(ctx, c.ws, frame{Type: "error", Code: "slow_consumer",
				Message: fmt.Sprintf("%d events unacknowledged for %v: ack what you process; reconnect to catch up", inflight, s.cfg.WriteTimeout)})
			return closeReason{"slow_consumer", CloseSlowConsumer, "slow consumer: window full"}
		case <-heartbeat.C:
			s.flushAck(ctx, name, c, true)
			if err := write(ctx, c.ws, frame{Type: "heartbeat", Head: ptr(ch.head())}); err != nil {
				return s.reasonFor(ctx, c, err)
			}
			pctx, cancel := context.WithTimeout(ctx, s.cfg.Heartbeat)
			err := c.ws.Ping(pctx)
			cancel()
			if err != nil {
				return closeReason{"heartbeat_timeout", websocket.StatusGoingAway, "no answer to ping"}
			}
		}
	}
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

// maxBadFrames is how many bad frames a connection may send (each answered
// with an error frame) before it is closed with 4400.
const maxBadFrames = 16

// readAcks reads the client's frames: acks, and errors for anything else.
func (s *Server) readAcks(ctx context.Context, ws *websocket.Conn, c *client) {
	bad := 0
	for {
		_, data, err := ws.Read(ctx)
		if err != nil {
			return
		}
		seq, err := parseAck(data)
		code := "bad_frame"
		if err == nil {
			c.mu.Lock()
			if sent := c.sent; seq > sent {
				err, code = fmt.Errorf("ack of seq %d, but only %d was sent", seq, sent), "bad_ack"
			} else if acked := c.acked; seq > acked {
				c.acked = seq
				s.m.unacked.Sub(float64(seq - acked))
			}
			c.mu.Unlock()
		}
		if err != nil {
			if bad++; bad > maxBadFrames {
				c.kick(CloseBadHello, "too many bad frames") // the write loop closes; read on until then
				continue
			}
			_ = write(ctx, ws, frame{Type: "error", Code: code, Message: err.Error()})
			continue
		}
		select {
		case c.wake <- struct{}{}: // the window may have room again
		default:
		}
	}
}

// ackRefresh is how often a connected client's ack row is rewritten even if its
// ack did not move, so that a store's client expiry never drops a live client.
const ackRefresh = 5 * time.Minute

// flushAck records c's latest ack in the store, if it moved (or, with refresh,
// if the row is due for a refresh). Acks only drive trimming, so they are
// written at each heartbeat and at disconnect, not one write per ack frame.
func (s *Server) flushAck(ctx context.Context, channelName string, c *client, refresh bool) {
	c.mu.Lock()
	acked, done, seen := c.acked, c.flushed, c.seen
	c.mu.Unlock()
	if acked <= done && !(refresh && time.Since(seen) > ackRefresh) {
		return
	}
	if err := s.store.Ack(ctx, channelName, c.id, acked); err != nil {
		s.cfg.Logger.Warn("stream: ack not recorded", "channel", channelName, "err", err)
		return
	}
	c.mu.Lock()
	c.flushed = max(c.flushed, acked)
	c.seen = time.Now()
	c.mu.Unlock()
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

// poll wakes the clients of channels whose head moved in the store.
func (s *Server) poll() {
	t := time.NewTicker(s.cfg.PollInterval)
	defer t.Stop()
	for {
		select {
		case <-s.done:
			return
		case <-t.C:
		}
		s.mu.Lock()
		names := make([]string, 0, len(s.channels))
		for n := range s.channels {
			names = append(names, n)
		}
		s.mu.Unlock()
		for _, n := range names {
			head, err := s.store.Head(context.Background(), n)
			if err != nil {
				continue
			}
			s.mu.Lock()
			ch := s.channels[n]
			s.mu.Unlock()
			if ch == nil {
				continue
			}
			ch.mu.Lock()
			moved := head > ch.max
			ch.max = max(ch.max, head)
			ch.mu.Unlock()
			if moved {
				s.Notify(n, Event{})
			}
		}
	}
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}

func ptr[T any](v T) *T { return &v }
