// Package gateway is what `idem serve` runs, importable: a reverse proxy to an
// upstream that makes any HTTP API safe to retry. A POST or PATCH with an
// Idempotency-Key runs the upstream once and every retry gets the stored response
// again (package idemhttp); with Config.Webhook it fronts a webhook endpoint
// instead, verifying each delivery's signature and running the upstream once per
// event id (package webhook).
//
// New returns a Gateway, which is an http.Handler: mount it in a service's own
// server, or let Run serve it (and /metrics and /healthz on an admin listener)
// with idem serve's timeouts, connection bound and graceful stop. Config holds the
// flags of idem serve, with their defaults for zero values; the store is opened by
// the caller (idem serve's --store URLs are the command's business).
//
// The gateway's own answers are RFC 9457 problem documents: 502 when the upstream
// could not be reached and 504 when it ran past UpstreamTimeout; in both cases the
// key is released, not stored, so a retry runs the request again.
package gateway

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemhttp"
	"github.com/idemhq/idem/webhook"
)

// The defaults of Config's zero values: idem serve's flags' defaults.
const (
	DefaultUpstreamTimeout = 60 * time.Second // --upstream-timeout
	DefaultReadTimeout     = 30 * time.Second // --read-timeout
	DefaultIdleTimeout     = 2 * time.Minute  // --idle-timeout
	DefaultShutdownTimeout = 30 * time.Second // --shutdown-timeout
	// DefaultMaxConns bounds the client connections (--max-conns): each costs a
	// goroutine and its buffers, about 16 KiB idle, so 4,096 hold about 64 MiB,
	// beside the file descriptors (raise ulimit -n above it).
	DefaultMaxConns = 4096
)

// Config is a gateway: idem serve's flags as fields. Zero values take the flags'
// defaults.
type Config struct {
	// Upstream is the service behind the gateway: http:// or https:// with a host
	// and an optional base path (required). Userinfo (http://user:pw@host) is sent
	// as basic authentication on every request whose client sent no Authorization
	// of its own.
	Upstream *url.URL
	// Store keeps the keys and responses (required). The gateway sweeps it (if it
	// is an idem.Sweeper) while it runs, and never closes it.
	Store idem.Store
	// Idempotency configures the Idempotency-Key middleware: idem serve's --methods,
	// --wait, --lease, --retention, --max-body, --scope-header and the others. Its
	// Store, Registerer and Logger are this Config's. Unused with Webhook.
	Idempotency idemhttp.Config
	// Webhook, when set, fronts a webhook endpoint instead (--webhook): every POST's
	// signature is checked by its Verifier, and the upstream runs once per event
	// id. Its Store, Registerer and Logger are this Config's.
	Webhook *webhook.Config
	// UpstreamTimeout bounds an upstream call, response body included: then 504,
	// and the key is released, not stored. Default DefaultUpstreamTimeout.
	UpstreamTimeout time.Duration
	// ReadTimeout bounds how long a client may take to send a request (default
	// DefaultReadTimeout); WriteTimeout, from a request's headers to the end of its
	// response, must exceed UpstreamTimeout plus the middleware's Wait (default:
	// their sum plus ReadTimeout and 5 s); IdleTimeout closes idle keep-alive
	// connections (default DefaultIdleTimeout). Run's servers only.
	ReadTimeout, WriteTimeout, IdleTimeout time.Duration
	// MaxConns bounds the client connections Run's listener holds open; more wait
	// in the kernel's accept queue. Default DefaultMaxConns.
	MaxConns int
	// ShutdownTimeout is how long Close waits for requests in flight before
	// cutting them. Default DefaultShutdownTimeout.
	ShutdownTimeout time.Duration
	// Admin is served on Run's admin listener. Default: GET /metrics from
	// Registerer (when it is a prometheus.Gatherer) and GET /healthz from
	// Gateway.Health.
	Admin http.Handler
	// Registerer receives the middleware's metrics (idem_http_requests_total …),
	// labelled by outcome only. Nil: none.
	Registerer prometheus.Registerer
	// Logger receives the upstream's and the store's failures. Default
	// slog.Default().
	Logger *slog.Logger
	// Reason words a store's failure for /healthz, which anyone who reaches it
	// reads: never the driver's text, which names the database user, the database
	// and its addresses. Default: "failed (details in the log)".
	Reason func(error) string
}

// withDefaults fills the zero values.
func (c Config) withDefaults() Config {
	c.UpstreamTimeout = cmp.Or(c.UpstreamTimeout, DefaultUpstreamTimeout)
	c.ReadTimeout = cmp.Or(c.ReadTimeout, DefaultReadTimeout)
	c.IdleTimeout = cmp.Or(c.IdleTimeout, DefaultIdleTimeout)
	c.ShutdownTimeout = cmp.Or(c.ShutdownTimeout, DefaultShutdownTimeout)
	c.MaxConns = cmp.Or(c.MaxConns, DefaultMaxConns)
	if c.WriteTimeout == 0 {
		c.WriteTimeout = c.ReadTimeout + c.UpstreamTimeout + c.wait() + 5*time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Reason == nil {
		c.Reason = func(error) string { return "failed (details in the log)" }
	}
	return c
}

// wait is how long a retry may wait for its key's first request.
func (c Config) wait() time.Duration {
	if c.Webhook != nil {
		return c.Webhook.Wait
	}
	return c.Idempotency.Wait
}

// lease is how long a key stays claimed after its gateway was last heard of.
func (c Config) lease() time.Duration {
	l := c.Idempotency.Lease
	if c.Webhook != nil {
		l = c.Webhook.Lease
	}
	return cmp.Or(l, idem.DefaultLease)
}

// Gateway is the middleware over the reverse proxy to the upstream. It is an
// http.Handler; Run (or Serve and Close) serves it on a listener of its own.
type Gateway struct {
	cfg     Config
	handler http.Handler
	health  func(context.Context) (bool, string)
	run     *running // set by Serve
}

// New checks cfg and builds the gateway. Errors of the middleware's configuration
// are the middleware's (an *idem.InputError naming the Config field).
func New(cfg Config) (*Gateway, error) {
	u := cfg.Upstream
	switch {
	case u == nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
		return nil, &idem.InputError{Field: "Config.Upstream", Reason: "not an http:// or https:// URL with a host",
			Fix: "set it to the service behind the gateway, such as http://127.0.0.1:9000"}
	case cfg.Store == nil:
		return nil, &idem.InputError{Field: "Config.Store", Reason: "is nil", Fix: "pass the store that keeps the keys and responses"}
	case cfg.WriteTimeout < 0 || (cfg.WriteTimeout > 0 && cfg.WriteTimeout <= cmp.Or(cfg.UpstreamTimeout, DefaultUpstreamTimeout)+cfg.wait()):
		return nil, &idem.InputError{Field: "Config.WriteTimeout", Reason: fmt.Sprintf("%v does not exceed UpstreamTimeout + Wait", cfg.WriteTimeout),
			Fix: "raise it, or leave it 0 for their sum plus ReadTimeout and 5s"}
	}
	cfg = cfg.withDefaults()
	mw, err := cfg.middleware()
	if err != nil {
		return nil, err
	}
	proxy := bounded(newProxy(cfg.Upstream, cfg.UpstreamTimeout, cfg.Logger), cfg.UpstreamTimeout)
	return &Gateway{cfg: cfg, handler: catchUnreached(mw(proxy)),
		health: StoreHealth(cfg.Store, cfg.Logger, cfg.Reason)}, nil
}

// middleware is the webhook receiver with Webhook, the Idempotency-Key middleware
// otherwise, over the Config's store, registerer and logger.
func (c Config) middleware() (func(http.Handler) http.Handler, error) {
	if c.Webhook != nil {
		w := *c.Webhook
		w.Store, w.Registerer, w.Logger = c.Store, c.Registerer, c.Logger
		return webhook.Receiver(w)
	}
	m := c.Idempotency
	m.Store, m.Registerer, m.Logger = c.Store, c.Registerer, c.Logger
	return idemhttp.Middleware(m)
}

// Health is the gateway's /healthz: StoreHealth of its store.
func (g *Gateway) Health(ctx context.Context) (bool, string) { return g.health(ctx) }

// ServeHTTP runs r through the middleware and, once, the upstream.
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) { g.handler.ServeHTTP(w, r) }

// errNotServing is Close's error before Serve.
var errNotServing = errors.New("gateway: Close before Serve")
