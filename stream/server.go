package stream

import (
	"cmp"
	"context"
	_ "embed"
	"fmt"
	"log/slog"
	"net/http"
	"path"
	"sync"
	"time"

	"github.com/coder/websocket"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/internal/otelx"
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
	CloseTooMany            websocket.StatusCode = 4429 // the caller's principal holds MaxPerPrincipal sockets
	DefaultHeartbeat                             = 15 * time.Second
	DefaultSendBuffer                            = 1024
	DefaultHandshakeTimeout                      = 5 * time.Second
	DefaultMaxConnections                        = 10000
	DefaultMaxPending                            = 1024
	DefaultMaxPerPrincipal                       = 64
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
	// MaxConnections bounds the sockets admitted at once (their hello authorized):
	// while they are all taken, a handshake is refused with 503 and Retry-After, and
	// a socket authorized meanwhile is closed with 1013 (try again later) and an
	// "unavailable" error frame. Zero means DefaultMaxConnections (about 400 MiB of
	// connection state at the measured ~40 KiB each); negative means no bound (bound
	// the listener or the proxy in front instead).
	MaxConnections int
	// MaxPending bounds the sockets past the WebSocket handshake whose hello has not
	// been authorized yet, in a pool apart from MaxConnections: opening one takes no
	// credential, so they must not take the slots of callers who have one. When it
	// is full, a new handshake closes the oldest pending socket, so sockets that
	// never say hello cannot keep out a client that does (clients send it as soon
	// as the socket opens). Zero means DefaultMaxPending; negative means no bound.
	MaxPending int
	// MaxPerPrincipal bounds the sockets admitted at once for one principal, the
	// non-empty name Principal gives the caller: one more is closed with
	// CloseTooMany (4429) and a "too_many_connections" error frame, so one user (or
	// one stolen session) cannot hold every slot. Without Principal, or for a
	// caller it names "", there is no principal to count. Zero means
	// DefaultMaxPerPrincipal; negative means no bound.
	MaxPerPrincipal int
	// HandshakeTimeout bounds the wait for the hello frame after the WebSocket
	// handshake. Default DefaultHandshakeTimeout (5 s). (The HTTP handshake itself
	// is bounded by the http.Server's ReadHeaderTimeout.)
	HandshakeTimeout time.Duration
	// WriteTimeout bounds one frame's write and the wait for an ack when a client's
	// window is full: a client that neither reads nor acks for this long is a slow
	// consumer and is disconnected. Default 10 s.
	WriteTimeout time.Duration
	// PollInterval, if positive, makes the server look for events appended to the
	// store by other processes (not through Append) this often. Zero: only Append
	// wakes clients.
	PollInterval time.Duration
	// Registerer receives idem_stream_clients, idem_stream_pending (sockets whose
	// hello is not authorized yet), idem_stream_events_sent_total,
	// idem_stream_unacked (events sent and not yet acknowledged, summed over
	// clients) and idem_stream_disconnects_total{reason}.
	Registerer prometheus.Registerer
	Logger     *slog.Logger
	// TracerProvider receives a span per Append and per batch of events written
	// to a client (see Tracing in the package documentation). Nil means the global
	// provider; while that is unset, or with a no-op provider, no span is started.
	TracerProvider trace.TracerProvider
}

// Server pushes channels' events to WebSocket clients: replay after the client's
// last seq, then live, in seq order, with acks and heartbeats; and the same events
// over REST (GET /events), the truth when the socket lies. See the package docs.
type Server struct {
	store Store
	cfg   ServerConfig
	m     *streamMetrics
	tr    otelx.Tracer

	slots    *slots // MaxPending, MaxConnections, MaxPerPrincipal
	mu       sync.Mutex
	channels map[string]*channel
	closed   bool
	done     chan struct{}
	wg       sync.WaitGroup // the poller
	active   sync.WaitGroup // connections, so Close returns after their last ack flush
}

// positiveOr returns v, or def where v is not positive.
func positiveOr[T int | time.Duration](v, def T) T {
	if v <= 0 {
		return def
	}
	return v
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
	cfg.Heartbeat = positiveOr(cfg.Heartbeat, DefaultHeartbeat)
	cfg.HandshakeTimeout = positiveOr(cfg.HandshakeTimeout, DefaultHandshakeTimeout)
	cfg.SendBuffer = positiveOr(cfg.SendBuffer, DefaultSendBuffer)
	cfg.WriteTimeout = positiveOr(cfg.WriteTimeout, defaultWriteTimeout)
	cfg.MaxConnections = cmp.Or(cfg.MaxConnections, DefaultMaxConnections)
	cfg.MaxPending = cmp.Or(cfg.MaxPending, DefaultMaxPending)
	cfg.MaxPerPrincipal = cmp.Or(cfg.MaxPerPrincipal, DefaultMaxPerPrincipal)
	cfg.Logger = cmp.Or(cfg.Logger, slog.Default())
	m, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, err
	}
	s := &Server{store: store, cfg: cfg, m: m, channels: map[string]*channel{}, done: make(chan struct{}),
		tr:    otelx.New(cfg.TracerProvider, nil),
		slots: newSlots(cfg.MaxPending, cfg.MaxConnections, cfg.MaxPerPrincipal, func(d int) { m.pending.Add(float64(d)) })}
	if cfg.PollInterval > 0 {
		s.wg.Go(s.poll)
	}
	return s, nil
}

// Append stores e on channel and wakes the channel's clients. It returns the
// event as stored, with its seq.
func (s *Server) Append(ctx context.Context, channelName string, e Event) (_ Event, err error) {
	if !s.tr.Off() {
		var span trace.Span
		ctx, span = s.tr.Start(ctx, otelx.SpanStreamAppend, otelx.KindProducer...)
		defer func() { endAppend(span, channelName, e, err) }()
	}
	e, err = s.store.Append(ctx, channelName, e)
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
		c := cached{e: e}
		c.encode()
		ch.tail[e.Seq] = c
		ch.top = max(ch.top, e.Seq)
		// Concurrent appends (a shared commit among them) are notified in any
		// order: the head moves over the tail's contiguous seqs only, so a client
		// is not sent to the store for an event whose Notify is on its way. A gap
		// still open after gapWait (an append notified nowhere) moves it anyway,
		// and the clients read the gap from the store.
		for {
			if _, ok := ch.tail[ch.max+1]; !ok {
				break
			}
			ch.max++
		}
		if ch.top > ch.max && ch.gap == nil {
			ch.gap = time.AfterFunc(gapWait, func() { s.closeGap(ch) })
		}
		for len(ch.tail) > s.cfg.SendBuffer {
			for seq := range ch.tail {
				if seq+uint64(s.cfg.SendBuffer) <= ch.top {
					delete(ch.tail, seq)
				}
			}
		}
	}
	ch.mu.Unlock()
	ch.wake()
}

// gapWait is how long a channel's head waits for the Notify of a seq below one
// already notified before it moves past it (see Notify).
const gapWait = 50 * time.Millisecond

// closeGap moves ch's head to the highest seq notified, after gapWait.
func (s *Server) closeGap(ch *channel) {
	ch.mu.Lock()
	ch.gap = nil
	moved := ch.top > ch.max
	ch.max = max(ch.max, ch.top)
	ch.mu.Unlock()
	if moved {
		ch.wake()
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
	s.slots.evictAll(errClosed)
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
