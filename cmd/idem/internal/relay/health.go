// Package relay is the runtime of idem relay beside the outbox relay itself: the
// Health that its /healthz reports, fed by the database pings and the sink's
// publications.
package relay

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/cmd/idem/internal/cli"
	"github.com/idemhq/idem/internal/wait"
	"github.com/idemhq/idem/internal/warn"
)

// Health decides /healthz. The relay is unhealthy when its database answered no
// ping and no publication succeeded within the window (3 poll intervals), and when
// messages wait and none was published for longer than StallAfter, whatever the
// cause: rounds that fail, a broker that refuses every message, rows the relay
// cannot read (outbox.Relay.Stall measures it, for every relay of the outbox, at
// each ping). A broker that refuses some messages while others go through keeps the
// relay healthy: the failures show in idem_relay_failures_total and in the /healthz
// text.
//
// /healthz reports a status and a sanitized reason only (cli.ReasonOf): whoever can
// reach it must not read a downstream's words, which may quote anything (a webhook
// receiver's error page once quoted its database URL with the password). The
// details go to the log, redacted.
type Health struct {
	window     time.Duration
	StallAfter time.Duration // 0: no stall check (relay --cdc)
	now        func() time.Time
	pings      *warn.Repeats

	mu                    sync.Mutex
	lastPing, lastPublish time.Time
	pingErr, publishErr   error
	stalled               time.Duration // the last Stall measured
}

// NewHealth returns the health of a relay that polls every window/3, logging the
// pings' failures to log.
func NewHealth(window time.Duration, log *slog.Logger) *Health {
	return &Health{window: window, now: time.Now, lastPing: time.Now(),
		pings: warn.New(log, "idem relay: the database does not answer", "idem relay: the database answers again")}
}

// pinged records a database ping. The publications' failures are logged by the
// relay; the pings' are logged here, a series of them in a few lines.
func (h *Health) pinged(err error) {
	if err != nil {
		h.pings.Fail(context.Background(), err)
	} else {
		h.pings.OK(context.Background())
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.pingErr = err
	if err == nil {
		h.lastPing = h.now()
	}
}

// WatchStall returns a ping that measures the relay's stall (outbox.Relay.Stall):
// one query that shows the database answers, and whether messages wait unpublished.
func (h *Health) WatchStall(stall func(context.Context) (time.Duration, error)) func(context.Context) error {
	return func(ctx context.Context) error {
		d, err := stall(ctx)
		if err == nil {
			h.mu.Lock()
			h.stalled = d
			h.mu.Unlock()
		}
		return err
	}
}

func (h *Health) published(err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.publishErr = err
	if err == nil {
		h.lastPublish = h.now()
	}
}

// Check returns whether the relay is healthy and a one-line reason.
func (h *Health) Check() (bool, string) {
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
			why += ": database: " + cli.ReasonOf(h.pingErr)
		}
		return false, fmt.Sprintf("unhealthy: %s for %v (limit %v)", why, age.Round(time.Millisecond), h.window)
	}
	failed := ""
	if h.publishErr != nil {
		failed = "sink: " + cli.ReasonOf(h.publishErr)
	}
	if h.StallAfter > 0 && h.stalled > h.StallAfter {
		why := "the relay's rounds or the rows that wait: see the log and idem_relay_round_failures_total"
		if failed != "" {
			why = "the last attempt failed: " + failed
		}
		return false, fmt.Sprintf("unhealthy: messages wait and none was published for %v (limit %v); %s",
			h.stalled.Round(time.Millisecond), h.StallAfter, why)
	}
	msg := fmt.Sprintf("ok: database answered %v ago", now.Sub(h.lastPing).Round(time.Millisecond))
	if !h.lastPublish.IsZero() {
		msg += fmt.Sprintf("; last publication %v ago", now.Sub(h.lastPublish).Round(time.Millisecond))
	}
	if failed != "" {
		msg += "; the last attempt failed and will be retried: " + failed
	}
	return true, msg
}

// PingEvery pings the database every interval until ctx ends.
func (h *Health) PingEvery(ctx context.Context, interval time.Duration, ping func(context.Context) error) {
	wait.Every(ctx, interval, func() {
		pctx, cancel := context.WithTimeout(ctx, max(interval, time.Second))
		err := ping(pctx)
		cancel()
		if ctx.Err() == nil {
			h.pinged(err)
		}
	})
}

// Track returns sink, reporting each publication's outcome to h.
func (h *Health) Track(sink idem.Sink) idem.Sink { return trackedSink{Sink: sink, h: h} }

// trackedSink reports each publication's outcome to health.
type trackedSink struct {
	idem.Sink
	h *Health
}

func (s trackedSink) Publish(ctx context.Context, msgs ...idem.Message) error {
	err := s.Sink.Publish(ctx, msgs...)
	if ctx.Err() == nil {
		s.h.published(err)
	}
	return err
}

// Handler serves /metrics from reg and /healthz from h.
func Handler(reg *prometheus.Registry, h *Health) http.Handler {
	return cli.Probes(reg, func(context.Context) (bool, string) { return h.Check() })
}
