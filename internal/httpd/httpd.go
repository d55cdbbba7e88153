// Package httpd holds what idem's long-running processes share, whether run by
// the idem command (serve, relay, admin) or embedded (idemhttp/gateway): the
// handler of /metrics and /healthz, and an HTTP server whose every phase has a
// timeout.
package httpd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/net/netutil"
)

// Probes serves GET /metrics from g and GET /healthz from check: 200 with its
// message while healthy, 503 otherwise, then footer (the build, so an operator
// sees which binary answered) when it is not empty. No cache may keep a probe.
func Probes(g prometheus.Gatherer, check func(context.Context) (bool, string), footer string) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(g, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		ok, msg := check(r.Context())
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		if !ok {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		fmt.Fprintln(w, msg)
		if footer != "" {
			fmt.Fprintln(w, footer)
		}
	})
	return mux
}

// Timeouts are the http.Server timeouts of a daemon's listener: a client that
// sends its request slowly (Read), or reads its response slowly (Write), or keeps
// an idle connection (Idle), is cut off instead of holding a goroutine and a
// descriptor forever.
type Timeouts struct {
	Read, Write, Idle time.Duration
	MaxConns          int // open connections; 0 for no bound (an admin listener)
}

// Serve serves h on ln in the background with the timeouts to, and returns its
// server; fail receives the error if Serve ends other than by Shutdown or Close.
// Its log lines (a TLS handshake error, a panic) go to log as warnings.
func Serve(ln net.Listener, h http.Handler, to Timeouts, log *slog.Logger, fail func(error)) *http.Server {
	if to.MaxConns > 0 {
		// Beyond the bound, Accept waits: new clients queue in the kernel's backlog
		// until a connection closes, instead of costing a goroutine each.
		ln = netutil.LimitListener(ln, to.MaxConns)
	}
	// No BaseContext from a daemon's context: a stop must not cancel the requests
	// it lets finish.
	srv := &http.Server{Handler: h, ReadHeaderTimeout: min(10*time.Second, to.Read),
		ReadTimeout: to.Read, WriteTimeout: to.Write, IdleTimeout: to.Idle,
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
	go func() {
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			fail(err)
		}
	}()
	return srv
}
