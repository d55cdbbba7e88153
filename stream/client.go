package stream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/coder/websocket"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemkey"
	"github.com/idemhq/idem/internal/wait"
)

// ClientConfig configures a Client.
type ClientConfig struct {
	// URL is the server's base URL ("http://host:port/prefix"): the client uses
	// {URL}/stream (as ws:// or wss://) and {URL}/events.
	URL     string
	Channel string
	// Since is the last seq the caller already processed (0: from the start).
	Since uint64
	// ID names the client for acks: the server trims only what every client of
	// the channel acked, each under its own id, so two readers must not share
	// one. Empty: a random UUID, new for each Client (see Client.ID); set it to
	// keep one ack position across restarts of the process.
	ID string
	// OnEvent is called for each event exactly once, in seq order. An error stops
	// Run; the event is not acknowledged and comes again on the next Run.
	OnEvent func(Event) error
	// HTTPClient makes the REST catch-up requests and the WebSocket handshakes
	// (its Transport can add credentials). Nil means http.DefaultClient.
	HTTPClient *http.Client
	// Header is sent with the handshake and REST requests (Authorization).
	Header http.Header
	// MinBackoff and MaxBackoff bound the wait between reconnections (default 100
	// ms and 5 s, with jitter).
	MinBackoff, MaxBackoff time.Duration
	// OnDisconnect, if set, is told why each connection ended.
	OnDisconnect func(err error)
}

// Client receives a channel across disconnects: each event once, in order.
// It reconnects with backoff after the socket drops, resumes after its last seq,
// drops repeats, and fills a gap (a seq that skips) over REST before going on.
type Client struct {
	cfg  ClientConfig
	last uint64
}

// NewClient returns a client; Run starts it.
func NewClient(cfg ClientConfig) (*Client, error) {
	switch {
	case cfg.URL == "":
		return nil, errors.New("stream: ClientConfig.URL is empty: pass the server's base URL, e.g. http://localhost:8080")
	case cfg.OnEvent == nil:
		return nil, errors.New("stream: ClientConfig.OnEvent is nil: pass the function that handles each event")
	}
	if err := validateChannel(cfg.Channel); err != nil {
		return nil, err
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = http.DefaultClient
	}
	if cfg.MinBackoff <= 0 {
		cfg.MinBackoff = 100 * time.Millisecond
	}
	if cfg.MaxBackoff < cfg.MinBackoff {
		cfg.MaxBackoff = max(5*time.Second, cfg.MinBackoff)
	}
	if cfg.ID == "" {
		cfg.ID = idemkey.NewV4()
	}
	if err := validateClientID(cfg.ID); err != nil {
		return nil, &idem.InputError{Field: "ClientConfig.ID", Reason: err.Error(), Fix: "leave it empty for a random UUID"}
	}
	cfg.URL = strings.TrimRight(cfg.URL, "/")
	return &Client{cfg: cfg, last: cfg.Since}, nil
}

// ID is the id the client's acks are recorded under.
func (c *Client) ID() string { return c.cfg.ID }

// LastSeq is the seq of the last event OnEvent accepted.
func (c *Client) LastSeq() uint64 { return c.last }

// errStop wraps an OnEvent error: Run returns it.
type errStop struct{ err error }

func (e errStop) Error() string { return e.err.Error() }

// Run receives until ctx ends (returning ctx's error) or OnEvent fails.
func (c *Client) Run(ctx context.Context) error {
	failures := 0
	for {
		ready, err := c.session(ctx)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		var stop errStop
		if errors.As(err, &stop) {
			return stop.err
		}
		if c.cfg.OnDisconnect != nil {
			c.cfg.OnDisconnect(err)
		}
		if ready {
			failures = 0
		}
		failures++
		d := min(c.cfg.MaxBackoff, c.cfg.MinBackoff<<min(failures-1, 16))
		if !wait.Sleep(ctx, time.Duration(rand.Int64N(int64(d)+1))) {
			return ctx.Err()
		}
	}
}

// session runs one connection; ready reports whether the server accepted it.
func (c *Client) session(ctx context.Context) (ready bool, err error) {
	u := "ws" + strings.TrimPrefix(c.cfg.URL, "http") + "/stream"
	ws, _, err := websocket.Dial(ctx, u, &websocket.DialOptions{HTTPClient: c.cfg.HTTPClient, HTTPHeader: c.cfg.Header})
	if err != nil {
		return false, err
	}
	defer ws.CloseNow()
	ws.SetReadLimit(2 << 20)
	if err := write(ctx, ws, frame{Type: "hello", Channel: c.cfg.Channel, Since: c.last, Client: c.cfg.ID, Batch: true}); err != nil {
		return false, err
	}
	acked, every := c.last, uint64(32)
	for {
		_, data, err := ws.Read(ctx)
		if err != nil {
			return ready, err
		}
		var f frame
		if err := json.Unmarshal(data, &f); err != nil {
			return ready, fmt.Errorf("stream: bad frame from the server: %w", err)
		}
		switch f.Type {
		case "ready":
			ready = true
			if f.Window > 0 {
				every = uint64(max(1, min(32, f.Window/2)))
			}
		case "error":
			if f.Code == "trimmed" {
				return ready, errStop{fmt.Errorf("stream: %s", f.Message)}
			}
		case "event", "events":
			if f.Event != nil {
				f.Events = append(f.Events, *f.Event)
			}
			for _, e := range f.Events {
				if err := c.deliver(ctx, e); err != nil {
					return ready, err
				}
			}
			if c.last >= acked+every {
				if err := write(ctx, ws, frame{Type: "ack", Seq: c.last}); err != nil {
					return ready, err
				}
				acked = c.last
			}
		case "heartbeat":
			if c.last > acked {
				if err := write(ctx, ws, frame{Type: "ack", Seq: c.last}); err != nil {
					return ready, err
				}
				acked = c.last
			}
		}
	}
}

// deliver hands e over once: repeats are dropped, and a gap is filled over REST.
func (c *Client) deliver(ctx context.Context, e Event) error {
	if e.Seq <= c.last {
		return nil
	}
	for e.Seq > c.last+1 {
		if err := c.catchUp(ctx, e.Seq-1); err != nil {
			return err
		}
	}
	if err := c.cfg.OnEvent(e); err != nil {
		return errStop{err}
	}
	c.last = e.Seq
	return nil
}

// catchUp reads events after the last seq over REST, up to until.
func (c *Client) catchUp(ctx context.Context, until uint64) error {
	q := url.Values{"channel": {c.cfg.Channel}, "since": {fmt.Sprint(c.last)}, "limit": {"1000"}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.cfg.URL+"/events?"+q.Encode(), nil)
	if err != nil {
		return err
	}
	for k, v := range c.cfg.Header {
		req.Header[k] = v
	}
	resp, err := c.cfg.HTTPClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("stream: catch-up: %s", resp.Status)
	}
	var page struct {
		Events []Event `json:"events"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&page); err != nil {
		return err
	}
	if len(page.Events) == 0 {
		return fmt.Errorf("stream: catch-up after seq %d returned nothing", c.last)
	}
	for _, e := range page.Events {
		if e.Seq > until {
			break
		}
		if e.Seq != c.last+1 {
			continue
		}
		if err := c.cfg.OnEvent(e); err != nil {
			return errStop{err}
		}
		c.last = e.Seq
	}
	return nil
}
