package gateway

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sync"
	"time"
)

// newProxy returns the reverse proxy to upstream. Its transport keeps many idle
// connections per host (the default keeps 2, so 8 concurrent clients would open and
// close a connection per request) and ignores $HTTP_PROXY: the upstream is addressed
// directly. Wrap the middleware in catchUnreached, and the proxy in bounded: see
// upstreamUnreached and upstreamTimedOut.
//
// Userinfo in the upstream URL (http://user:password@host) is sent to the upstream
// as basic authentication on every request whose client sent no Authorization of
// its own: it is the gateway's identity for callers that carry none. A client's own
// Authorization is forwarded unchanged (and it is part of the client's key scope).
func newProxy(upstream *url.URL, timeout time.Duration, log *slog.Logger) *httputil.ReverseProxy {
	user := upstream.User
	target := *upstream
	target.User = nil
	return &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(&target)
			pr.SetXForwarded()
			if user != nil && pr.Out.Header.Get("Authorization") == "" {
				pw, _ := user.Password()
				pr.Out.SetBasicAuth(user.Username(), pw)
			}
		},
		Transport:  UpstreamTransport(timeout),
		BufferPool: BufferPool,
		ErrorLog:   slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			log.WarnContext(r.Context(), "idem serve: the upstream did not answer", "method", r.Method, "path", r.URL.Path, "err", err)
			if op, ok := errors.AsType[*net.OpError](err); ok && op.Op == "dial" {
				panic(upstreamUnreached{})
			}
			if ne, ok := errors.AsType[net.Error](err); (ok && ne.Timeout()) || errors.Is(err, context.DeadlineExceeded) {
				panic(upstreamTimedOut{})
			}
			writeBadGateway(w)
		},
	}
}

// bounded runs h (the proxy) with a deadline of timeout: the middleware detaches a
// keyed request from its client, so without it a hung upstream would hold the
// request's goroutine, buffers and connections forever after the client left.
func bounded(h http.Handler, timeout time.Duration) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), timeout)
		defer cancel()
		h.ServeHTTP(w, r.WithContext(ctx))
	})
}

// upstreamTimedOut is panicked by the proxy when the upstream call ran past
// --upstream-timeout. Like upstreamUnreached, the middleware releases the key
// rather than store a 504 for the whole --retention (the upstream may still finish,
// or may not have started: a retry runs it again, which the upstream must tolerate
// as it would any retry of a request that timed out), and catchUnreached answers
// 504. A call cut after the upstream's headers arrived is aborted by the proxy
// (http.ErrAbortHandler): the key is released and the client's connection closed.
type upstreamTimedOut struct{}

// upstreamUnreached is panicked by the proxy when it could not connect to the
// upstream, so the request certainly did not run there. The middleware gives the key
// of a panicking handler back, and catchUnreached, outside the middleware, answers
// 502: a retry runs the request once the upstream is back, where a stored 502 would
// be replayed for the whole --retention. (A request that reached the upstream but got
// no answer may have run: its 502 is stored like any 5xx, as --store-5xx says.)
type upstreamUnreached struct{}

// catchUnreached answers 502 to a request whose upstream could not be reached, and
// 504 to one whose upstream call timed out.
func catchUnreached(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if v := recover(); v != nil {
				switch v.(type) {
				case upstreamUnreached:
					writeBadGateway(w)
				case upstreamTimedOut:
					writeGatewayTimeout(w)
				default:
					panic(v)
				}
			}
		}()
		h.ServeHTTP(w, r)
	})
}

func writeBadGateway(w http.ResponseWriter) {
	writeProblem(w, http.StatusBadGateway, `{"type":"about:blank","title":"Bad Gateway","status":502,`+
		`"detail":"idem serve: the upstream did not answer; the gateway's log has the reason"}`)
}

func writeGatewayTimeout(w http.ResponseWriter) {
	writeProblem(w, http.StatusGatewayTimeout, `{"type":"urn:idem:problem:upstream-timeout","title":"Gateway Timeout","status":504,`+
		`"detail":"idem serve: the upstream did not answer within --upstream-timeout; the Idempotency-Key was released, not stored: a retry with the same key runs the request again"}`)
}

// writeProblem answers status with the RFC 9457 problem document problem, which
// no cache may keep.
func writeProblem(w http.ResponseWriter, status int, problem string) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = io.WriteString(w, problem+"\n")
}

// BufferPool is the gateway's pool of the proxy's 32 KiB copy buffers, else
// allocated per response: garbage that makes the collector scan the memory store's
// records more often. Exported with UpstreamTransport for a plain
// httputil.ReverseProxy to measure the gateway against.
var BufferPool httputil.BufferPool = proxyBuffers{}

type proxyBuffers struct{}

var proxyBufferPool = sync.Pool{New: func() any { return new([32 << 10]byte) }}

func (proxyBuffers) Get() []byte  { return proxyBufferPool.Get().(*[32 << 10]byte)[:] }
func (proxyBuffers) Put(b []byte) { proxyBufferPool.Put((*[32 << 10]byte)(b)) }

// UpstreamTransport is the transport the gateway calls its upstream with: every
// phase of a call is bounded (dial 10 s, TLS handshake 10 s, response headers
// timeout), beside the deadline of bounded over the whole call; it keeps many idle
// connections per host and ignores $HTTP_PROXY.
func UpstreamTransport(timeout time.Duration) *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.Proxy = nil
	t.DialContext = (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	t.TLSHandshakeTimeout = 10 * time.Second
	t.ResponseHeaderTimeout = timeout
	t.MaxIdleConns = 1024
	t.MaxIdleConnsPerHost = 256
	t.IdleConnTimeout = 90 * time.Second
	return t
}
