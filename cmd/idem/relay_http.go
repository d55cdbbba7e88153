package main

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/idemhq/idem"
)

// health decides /healthz: the relay is healthy while its database answered a ping,
// or a publication succeeded, within the window (3 poll intervals). A broker that
// refuses messages while the database answers keeps the relay healthy: restarting
// it would not help, and the failure shows in idem_relay_failures_total and in the
// /healthz text.
type health struct {
	window time.Duration
	now    func() time.Time

	mu                    sync.Mutex
	lastPing, lastPublish time.Time
	pingErr, publishErr   error
}

func newHealth(window time.Duration) *health {
	return &health{window: window, now: time.Now, lastPing: time.Now()}
}

func (h *health) pinged(err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.pingErr = err
	if err == nil {
		h.lastPing = h.now()
	}
}

func (h *health) published(err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.publishErr = err
	if err == nil {
		h.lastPublish = h.now()
	}
}

// check returns whether the relay is healthy and a one-line reason.
func (h *health) check() (bool, string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	now := h.now()
	last := h.lastPing
	if h.lastPublish.After(last) {
		last = h.lastPublish
	}
	if age := now.Sub(last); age > h.window {
		why := "no database ping or publication succeeded"
		if h.pingErr != nil {
			why += ": " + h.pingErr.Error()
		}
		return false, fmt.Sprintf("unhealthy: %s for %v (limit %v)", why, age.Round(time.Millisecond), h.window)
	}
	msg := fmt.Sprintf("ok: database answered %v ago", now.Sub(h.lastPing).Round(time.Millisecond))
	if !h.lastPublish.IsZero() {
		msg += fmt.Sprintf("; last publication %v ago", now.Sub(h.lastPublish).Round(time.Millisecond))
	}
	if h.publishErr != nil {
		msg += "; the last attempt failed and will be retried: " + h.publishErr.Error()
	}
	return true, msg
}

// pingEvery pings the database every interval until ctx ends.
func (h *health) pingEvery(ctx context.Context, interval time.Duration, ping func(context.Context) error) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			pctx, cancel := context.WithTimeout(ctx, max(interval, time.Second))
			err := ping(pctx)
			cancel()
			if ctx.Err() == nil {
				h.pinged(err)
			}
		}
	}
}

// trackedSink reports each publication's outcome to health.
type trackedSink struct {
	idem.Sink
	h *health
}

func (s trackedSink) Publish(ctx context.Context, msgs ...idem.Message) error {
	err := s.Sink.Publish(ctx, msgs...)
	if ctx.Err() == nil {
		s.h.published(err)
	}
	return err
}

// relayHandler serves /metrics from reg and /healthz from h.
func relayHandler(reg *prometheus.Registry, h *health) http.Handler {
	return adminHandler(reg, func(context.Context) (bool, string) { return h.check() })
}

// adminHandler serves /metrics from reg and /healthz from check, which returns whether
// the daemon is healthy and a one-line reason: the admin endpoints of relay and serve.
func adminHandler(reg *prometheus.Registry, check func(context.Context) (bool, string)) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		ok, msg := check(r.Context())
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		if !ok {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		fmt.Fprintln(w, msg)
	})
	return mux
}
