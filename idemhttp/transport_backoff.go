package idemhttp

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/idemhq/idem"
)

// retryable reports whether the outcome of attempt n may be retried.
func (c *clientCall) retryable(resp *http.Response, err error, n int) bool {
	if c.once || n >= c.cfg.maxAttempts {
		return false
	}
	if err != nil {
		return !errors.Is(err, idem.ErrInvalid)
	}
	return retryableStatus(resp.StatusCode)
}

// retryableStatus reports whether a status means "the same request may succeed later".
func retryableStatus(code int) bool {
	switch code {
	case http.StatusConflict, http.StatusTooManyRequests, http.StatusBadGateway,
		http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return true
	}
	return false
}

// delay returns how long to wait after attempt n before the next one, or false when
// no retry may start: MaxElapsed has passed, or ctx's deadline would pass first (the
// caller is better served by the last real outcome than by a deadline error).
func (c *clientCall) delay(ctx context.Context, n int, resp *http.Response, now time.Time) (time.Duration, bool) {
	d := c.cfg.backoff(n)
	if resp != nil {
		if ra, ok := parseRetryAfter(resp.Header.Get("Retry-After"), now); ok {
			d = max(d, ra)
		}
	}
	d = min(d, c.cfg.maxBackoff)
	left := c.start.Add(c.cfg.maxElapsed).Sub(now)
	if left <= 0 {
		return 0, false
	}
	d = min(d, left)
	if dl, ok := ctx.Deadline(); ok && !now.Add(d).Before(dl) {
		return 0, false
	}
	return d, true
}

// backoff returns the jittered wait after attempt n (n ≥ 1): uniform between
// minBackoff and min(maxBackoff, minBackoff·2ⁿ). The floor keeps a retry from
// hitting a struggling server at once; the spread keeps many clients from retrying
// in step.
func (c transportConfig) backoff(n int) time.Duration {
	ceiling := c.minBackoff
	for range n {
		if ceiling >= c.maxBackoff/2 {
			ceiling = c.maxBackoff
			break
		}
		ceiling *= 2
	}
	ceiling = min(ceiling, c.maxBackoff)
	if ceiling <= c.minBackoff {
		return c.minBackoff
	}
	return c.minBackoff + time.Duration(rand.Int64N(int64(ceiling-c.minBackoff)+1))
}

// parseRetryAfter reads a Retry-After value (RFC 9110, section 10.2.3): a number of
// seconds or an HTTP date. A date in the past means no wait; an unreadable value is
// ignored (false), as if absent.
func parseRetryAfter(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if secs, err := strconv.ParseInt(v, 10, 64); err == nil {
		if secs < 0 {
			return 0, false
		}
		// Beyond ~292 years a Duration overflows; MaxBackoff caps the wait anyway.
		return time.Duration(min(secs, int64(1<<62)/int64(time.Second))) * time.Second, true
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(t.Sub(now), 0), true
	}
	return 0, false
}

// discardResponse closes the response of an attempt that will be retried. Reading a
// little of what is left first lets the connection be reused; a long body is not
// worth the wait, and closing it costs only a new connection.
func discardResponse(resp *http.Response) {
	_, _ = io.CopyN(io.Discard, resp.Body, 4<<10)
	_ = resp.Body.Close()
}

// logRetry records a retry at debug level.
func (c *clientCall) logRetry(n int, resp *http.Response, err error, wait time.Duration) {
	ctx := c.req.Context()
	if !c.cfg.logger.Enabled(ctx, slog.LevelDebug) {
		return
	}
	cause := slog.Any("err", err)
	if resp != nil {
		cause = slog.Int("status", resp.StatusCode)
	}
	c.cfg.logger.LogAttrs(ctx, slog.LevelDebug, "idemhttp: retrying request",
		slog.String("method", c.req.Method), slog.String("host", c.req.URL.Host),
		slog.String("path", c.req.URL.Path), slog.String("key", c.key),
		slog.Int("attempt", n), cause, slog.Duration("wait", wait))
}

// logDebug records a debug message about c's request.
func (c *clientCall) logDebug(msg string, args ...any) {
	ctx := c.req.Context()
	if c.cfg.logger.Enabled(ctx, slog.LevelDebug) {
		args = append(args, "method", c.req.Method, "host", c.req.URL.Host, "path", c.req.URL.Path, "key", c.key)
		c.cfg.logger.DebugContext(ctx, msg, args...)
	}
}
