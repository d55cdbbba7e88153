// Package warn collapses the warnings of a failure that repeats, so that an outage
// of a database or a broker writes a few log lines rather than one per attempt of
// every loop that meets it.
//
// A Repeats stands for one place that fails again and again (a relay's rounds, a
// health ping). The first failure of a series is logged at warn level with its
// error; the next ones are counted, and logged again, with the count, the time since
// the first and the latest error, when the count reaches 8, 16, 32 and every power
// of two after: n failures in a row write about log₂ n lines, however fast they
// come. The first success after a series ends it, with one line at info level.
package warn

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// Repeats collapses the warnings of one repeated failure. Make it with New; it is
// safe for concurrent use.
type Repeats struct {
	log           *slog.Logger
	failed, again string
	now           func() time.Time

	mu    sync.Mutex
	n     int       // failures in the current series
	since time.Time // the first of them
}

// New returns the Repeats that logs failures to log as failed ("outbox relay:
// round failed") and the end of a series as again ("outbox relay: rounds succeed
// again").
func New(log *slog.Logger, failed, again string) *Repeats {
	return &Repeats{log: log, failed: failed, again: again, now: time.Now}
}

// Fail records a failure, err, and logs it if it is the first of its series or
// its count is a power of two from 8 on; attrs (slog key-value pairs) are added to
// the line. It reports whether it logged.
func (r *Repeats) Fail(ctx context.Context, err error, attrs ...any) bool {
	r.mu.Lock()
	r.n++
	if r.n == 1 {
		r.since = r.now()
	}
	n, since := r.n, r.since
	r.mu.Unlock()
	if n > 1 && (n < 8 || n&(n-1) != 0) {
		return false
	}
	args := append([]any{"err", err}, attrs...)
	if n > 1 {
		args = append(args, "failures", n, "for", r.now().Sub(since).Round(time.Millisecond))
	}
	r.log.WarnContext(ctx, r.failed, args...)
	return true
}

// OK records a success. After a series of failures it logs, at info level, how
// many there were and for how long; otherwise it does nothing.
func (r *Repeats) OK(ctx context.Context, attrs ...any) {
	r.mu.Lock()
	n, since := r.n, r.since
	r.n = 0
	r.mu.Unlock()
	if n == 0 {
		return
	}
	args := append([]any{"failures", n, "for", r.now().Sub(since).Round(time.Millisecond)}, attrs...)
	r.log.InfoContext(ctx, r.again, args...)
}

// Failing returns how many failures the current series has had, 0 after a success.
func (r *Repeats) Failing() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n
}
