// Package heartbeat renews the lease of a claimed key while its handler runs: the
// one renewal loop of the request middlewares (idemhttp, idemgrpc).
package heartbeat

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/idemhq/idem"
)

// Heartbeat renews the lease of a key while its handler runs, so a live holder
// keeps its key however long the handler takes: the lease only protects against a
// holder that died. It costs one runtime timer per request and no goroutine: the
// timer's function runs (on a goroutine of its own) only when the handler outlives a
// third of the lease, and a handler that returns sooner just stops the timer.
type Heartbeat struct {
	renewer  idem.Renewer
	k        idem.Key
	token    uint64
	lease    time.Duration
	interval time.Duration
	log      *slog.Logger

	mu      sync.Mutex
	stopped bool
	t       *time.Timer
}

// Start renews k's lease (held with token) every lease/3 until Stop is called; it
// returns nil (and Stop of a nil Heartbeat does nothing) when renewer is nil: a
// store that cannot renew.
func Start(renewer idem.Renewer, k idem.Key, token uint64, lease time.Duration, log *slog.Logger) *Heartbeat {
	if renewer == nil {
		return nil
	}
	h := &Heartbeat{renewer: renewer, k: k, token: token, lease: lease,
		interval: max(lease/3, time.Millisecond), log: log}
	h.mu.Lock()
	h.t = time.AfterFunc(h.interval, h.beat)
	h.mu.Unlock()
	return h
}

func (h *Heartbeat) beat() {
	// A renewal that takes longer than the interval is as good as lost: the next
	// one is due.
	ctx, cancel := context.WithTimeout(context.Background(), h.interval)
	err := h.renewer.Renew(ctx, h.k, h.token, h.lease)
	cancel()
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.stopped {
		return // the handler returned meanwhile: whatever Renew said no longer matters
	}
	switch {
	case errors.Is(err, idem.ErrLeaseLost):
		// Fenced: the lease ran out before a renewal arrived (a store outage longer
		// than the lease, a paused process) and a retry may have taken the key. This
		// holder's Complete will be refused; stop renewing.
		h.log.Warn("idem: the key's lease was lost while its request was still running; a retry may run it again and this response will not be stored",
			"key", h.k.String(), "err", err)
		return
	case errors.Is(err, idem.ErrCompleted):
		return
	case err != nil:
		// A transient store failure: try again at the next beat, while the lease
		// still has two thirds to run.
		h.log.Warn("idem: renewing the key's lease failed; retrying", "key", h.k.String(), "err", err)
	}
	h.t.Reset(h.interval)
}

// Stop ends the renewals. A renewal already under way may still land; it only
// extends a lease the caller is about to complete or release.
func (h *Heartbeat) Stop() {
	if h == nil {
		return
	}
	h.mu.Lock()
	h.stopped = true
	h.t.Stop()
	h.mu.Unlock()
}
