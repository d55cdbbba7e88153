package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/cmd/idem/internal/cli"
	"github.com/idemhq/idem/idemhttp"
	"github.com/idemhq/idem/internal/wait"
	"github.com/idemhq/idem/internal/warn"
)

// health decides /healthz. The relay is unhealthy when its database answered no
// ping and no publication succeeded within the window (3 poll intervals), and when
// messages wait and none was published for longer than stallAfter, whatever the
// cause: rounds that fail, a broker that refuses every message, rows the relay
// cannot read (outbox.Relay.Stall measures it, for every relay of the outbox, at
// each ping). A broker that refuses some messages while others go through keeps the
// relay healthy: the failures show in idem_relay_failures_total and in the /healthz
// text.
//
// /healthz reports a status and a sanitized reason only (reasonOf): whoever can
// reach it must not read a downstream's words, which may quote anything (a webhook
// receiver's error page once quoted its database URL with the password). The
// details go to the log, redacted.
type health struct {
	window     time.Duration
	stallAfter time.Duration // 0: no stall check (relay --cdc)
	now        func() time.Time
	pings      *warn.Repeats

	mu                    sync.Mutex
	lastPing, lastPublish time.Time
	pingErr, publishErr   error
	stalled               time.Duration // the last Stall measured
}

func newHealth(window time.Duration, log *slog.Logger) *health {
	return &health{window: window, now: time.Now, lastPing: time.Now(),
		pings: warn.New(log, "idem relay: the database does not answer", "idem relay: the database answers again")}
}

// pinged records a database ping. The publications' failures are logged by the
// relay; the pings' are logged here, a series of them in a few lines.
func (h *health) pinged(err error) {
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

// watchStall returns a ping that measures the relay's stall (outbox.Relay.Stall):
// one query that shows the database answers, and whether messages wait unpublished.
func (h *health) watchStall(stall func(context.Context) (time.Duration, error)) func(context.Context) error {
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
			why += ": database: " + reasonOf(h.pingErr)
		}
		return false, fmt.Sprintf("unhealthy: %s for %v (limit %v)", why, age.Round(time.Millisecond), h.window)
	}
	failed := ""
	if h.publishErr != nil {
		failed = "sink: " + reasonOf(h.publishErr)
	}
	if h.stallAfter > 0 && h.stalled > h.stallAfter {
		why := "the relay's rounds or the rows that wait: see the log and idem_relay_round_failures_total"
		if failed != "" {
			why = "the last attempt failed: " + failed
		}
		return false, fmt.Sprintf("unhealthy: messages wait and none was published for %v (limit %v); %s",
			h.stalled.Round(time.Millisecond), h.stallAfter, why)
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

// pingEvery pings the database every interval until ctx ends.
func (h *health) pingEvery(ctx context.Context, interval time.Duration, ping func(context.Context) error) {
	wait.Every(ctx, interval, func() {
		pctx, cancel := context.WithTimeout(ctx, max(interval, time.Second))
		err := ping(pctx)
		cancel()
		if ctx.Err() == nil {
			h.pinged(err)
		}
	})
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
// the daemon is healthy and a one-line reason: the admin endpoints of relay, serve and
// admin. /healthz's first line is that status; a second names the build
// ("idem v0.1.0 (4d11fda0c3b2)"), for whoever must tell which version answers.
func adminHandler(reg *prometheus.Registry, check func(context.Context) (bool, string)) http.Handler {
	return cli.Probes(reg, check)
}

// reasonOf names what failed in words that are idem's, not the downstream's: a
// status code, an errno, a protocol error code. It never quotes an error's text,
// which may hold a URL, a response body or a server's message.
func reasonOf(err error) string {
	var (
		status *idemhttp.StatusError
		pg     *pgconn.PgError
		ke     *kerr.Error
		ae     *amqp.Error
		dns    *net.DNSError
		ne     net.Error
		in     *idem.InputError
		be     *idem.BackendError
	)
	switch {
	case errors.As(err, &status):
		return fmt.Sprintf("webhook returned %d", status.StatusCode)
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.Is(err, syscall.ECONNRESET):
		return "connection reset"
	case errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH):
		return "host unreachable"
	case errors.As(err, &dns):
		return "host name not found"
	case errors.Is(err, nats.ErrNoResponders), errors.Is(err, jetstream.ErrNoStreamResponse):
		return "no responders: no JetStream stream holds the subject"
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, nats.ErrTimeout), errors.As(err, &ne) && ne.Timeout():
		return "timed out"
	case errors.As(err, &pg):
		return "postgres error SQLSTATE " + pg.Code
	case errors.As(err, &ke):
		return "kafka error " + ke.Message
	case errors.As(err, &ae):
		return fmt.Sprintf("amqp error %d", ae.Code)
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, net.ErrClosed), errors.Is(err, nats.ErrConnectionClosed):
		return "connection closed"
	case errors.As(err, &in):
		return "invalid message (" + in.Field + ")"
	case errors.Is(err, idem.ErrLeaseLost):
		return "lease lost"
	case errors.As(err, &be):
		return be.Backend + " " + be.Op + " failed (details in the log)"
	}
	return "failed (details in the log)"
}
