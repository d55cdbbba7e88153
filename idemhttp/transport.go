package idemhttp

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemkey"
	"github.com/idemhq/idem/internal/wait"
)

var _ http.RoundTripper = (*Transport)(nil)

// HeaderAttempts is set by Transport on the response it returns for a request it
// manages: how many attempts it made, the first included. Read it with Attempts.
const HeaderAttempts = "Idem-Attempts"

// Transport is an http.RoundTripper that makes POST and PATCH requests safe to
// retry: it sends one Idempotency-Key per logical request and the same key on every
// attempt, so a server that deduplicates by key (this package's middleware, Stripe's
// API) performs the effect once however many attempts reach it, and answers the
// late ones with the stored response.
//
// # The key
//
// The key is, in order: the Idempotency-Key header the caller set (kept as is, after
// idemkey.ValidateHeader); else, when the request's context carries a key lineage
// (WithKey), idemkey.Derive(parent, method+" "+host+path); else NewKey's. Only the
// Transport's copy of the request carries a key it chose: a caller that retries on
// its own, above the Transport (a job run again, a user clicking twice), must set the
// header or WithKey itself, or every retry is a new request to the server.
//
// # When it retries
//
// After a network error (any error from Base other than the end of the request's
// context) and after 409 (the key is in progress), 429, 502, 503 and 504. Never after
// 422, which means the key was already used with another request (retrying cannot
// change that), nor after any other status: that response is the answer.
//
// The n-th retry waits a random duration between MinBackoff and
// min(MaxBackoff, MinBackoff·2ⁿ), so the retries of many clients spread out instead
// of arriving together; a Retry-After header (seconds or an HTTP date) raises the
// wait to its value. The wait is capped by MaxBackoff and by MaxElapsed: no retry
// starts later than MaxElapsed after the first attempt. If the request's context ends
// during a wait, RoundTrip returns its error at once; if the context's deadline would
// pass before the wait ends, RoundTrip returns the last response (or error) at once
// instead. An http.Client's Timeout therefore bounds all attempts and waits together;
// bound a single attempt in Base (http.Transport.ResponseHeaderTimeout).
//
// # The retention rule
//
// A retry is only safe while the server remembers the key: once its record expires
// (Config.Retention, idem.DefaultRetention = 24 h by default, as at Stripe), a late
// retry runs the effect again. MaxElapsed must therefore stay below the server's
// retention, with a margin for the attempt itself. The default is 1 h, and a larger
// value is lowered to 23 h; set it lower still when the server keeps keys for less
// than a day.
//
// # The deadline
//
// Every attempt carries idem.HeaderDeadline (Idem-Deadline): the time after which
// the caller no longer waits for the answer, so a server (this package's
// middleware) must not act on an attempt that arrives later. It is the request
// context's deadline (an http.Client's Timeout sets one) when that comes first,
// else the first attempt's start + MaxElapsed + 1 min (the last retry starts by
// MaxElapsed; the minute lets it reach the server). A header the caller set is
// kept. The server compares it with its own clock: a client whose clock is
// behind the server's by more than its remaining budget sees 412
// (ProblemDeadlinePassed); keep clocks within idemkey.MaxSkew (NTP).
//
// Refusals are final: 410 (ProblemKeyExpired), 412 (ProblemDeadlinePassed) and
// 400 (ProblemKeyFromFuture, ProblemUntimedKey) are returned, never retried: the
// same key and deadline cannot succeed later.
//
// # Bodies
//
// Every attempt sends the same bytes. A body with GetBody (which http.NewRequest sets
// for a *bytes.Buffer, *bytes.Reader or *strings.Reader) is replayed with it. Another
// body is read into memory first, up to MaxBodyBytes; a larger one is streamed in a
// single attempt, without retries, since it cannot be sent twice (it still carries the
// key). For large uploads, pass a replayable body.
//
// # The result
//
// RoundTrip returns the final response whatever its status, with HeaderAttempts set:
// when the attempts run out on a retryable status, that is the last one. When they
// run out on network errors, or a network error is not retried, the error is an
// *idem.BackendError that names the key and the number of attempts and wraps Base's
// last error. Responses of earlier attempts are drained (a little) and closed.
//
// Other methods (GET, PUT, DELETE...) pass through to Base untouched: no key, no
// retries. The zero value is ready to use; a Transport is safe for concurrent use,
// and its fields must not change once it is in use.
type Transport struct {
	// Base sends each attempt. Nil means http.DefaultTransport.
	Base http.RoundTripper
	// Methods are the methods Transport manages. Nil means POST and PATCH.
	Methods []string
	// NewKey returns the key of a new logical request. Nil means idemkey.NewV7, which
	// carries its time so a server can reject it once it is older than its window.
	NewKey func(*http.Request) string
	// MaxAttempts bounds the attempts of one request, the first included. Zero means
	// 5; 1 turns retries off (the key is still sent).
	MaxAttempts int
	// MinBackoff is the shortest wait before a retry (default 100 ms), MaxBackoff the
	// longest (default 10 s, or MinBackoff if larger).
	MinBackoff, MaxBackoff time.Duration
	// MaxElapsed is the latest a retry may start after the first attempt. Zero means
	// 1 h; larger than 23 h is lowered to 23 h. Keep it below the server's retention:
	// see "The retention rule" above.
	MaxElapsed time.Duration
	// MaxBodyBytes is how much of a body without GetBody is held in memory to be
	// replayed. Zero means DefaultMaxBodyBytes (1 MiB); a larger body is sent once.
	MaxBodyBytes int64
	// Logger receives a debug record per retry. Nil means slog.Default().
	Logger *slog.Logger
	// TracerProvider makes a client span per attempt (idem.http.attempt, with
	// idem.key and idem.attempt); nil means the global one (otel.GetTracerProvider).
	// Propagator writes the attempt's trace context into the request headers
	// (traceparent); nil means the global one (otel.GetTextMapPropagator).
	TracerProvider trace.TracerProvider
	Propagator     propagation.TextMapPropagator
}

// Transport defaults and limits; see the fields of Transport.
const (
	transportMaxAttempts = 5
	transportMinBackoff  = 100 * time.Millisecond
	transportMaxBackoff  = 10 * time.Second
	transportMaxElapsed  = time.Hour
	// transportElapsedCap keeps the last retry an hour inside idem.DefaultRetention.
	transportElapsedCap = idem.DefaultRetention - time.Hour
)

// transportConfig is a Transport with its defaults applied and checked.
type transportConfig struct {
	base                   http.RoundTripper
	newKey                 func(*http.Request) string
	maxAttempts            int
	minBackoff, maxBackoff time.Duration
	maxElapsed             time.Duration
	maxBody                int64
	logger                 *slog.Logger
	tp                     trace.TracerProvider
	prop                   propagation.TextMapPropagator
}

// config applies the defaults; the error is an *idem.InputError naming the field.
func (t *Transport) config() (transportConfig, error) {
	c := transportConfig{base: t.Base, newKey: t.NewKey, maxAttempts: t.MaxAttempts,
		minBackoff: t.MinBackoff, maxBackoff: t.MaxBackoff, maxElapsed: t.MaxElapsed,
		maxBody: t.MaxBodyBytes, logger: t.Logger, tp: t.TracerProvider, prop: t.Propagator}
	bad := func(field, reason string) error {
		return &idem.InputError{Field: "Transport." + field, Reason: reason, Fix: "leave it 0 for the default"}
	}
	switch {
	case c.maxAttempts < 0:
		return c, bad("MaxAttempts", fmt.Sprintf("is negative (%d)", c.maxAttempts))
	case c.minBackoff < 0:
		return c, bad("MinBackoff", fmt.Sprintf("is negative (%s)", c.minBackoff))
	case c.maxBackoff < 0:
		return c, bad("MaxBackoff", fmt.Sprintf("is negative (%s)", c.maxBackoff))
	case c.maxElapsed < 0:
		return c, bad("MaxElapsed", fmt.Sprintf("is negative (%s)", c.maxElapsed))
	case c.maxBody < 0:
		return c, bad("MaxBodyBytes", fmt.Sprintf("is negative (%d)", c.maxBody))
	}
	if c.base == nil {
		c.base = http.DefaultTransport
	}
	if c.maxAttempts == 0 {
		c.maxAttempts = transportMaxAttempts
	}
	if c.minBackoff == 0 {
		c.minBackoff = transportMinBackoff
	}
	if c.maxBackoff == 0 {
		c.maxBackoff = max(transportMaxBackoff, c.minBackoff)
	}
	if c.maxBackoff < c.minBackoff {
		return c, &idem.InputError{Field: "Transport.MaxBackoff",
			Reason: fmt.Sprintf("(%s) is below MinBackoff (%s)", c.maxBackoff, c.minBackoff),
			Fix:    "raise MaxBackoff, or leave it 0 for max(10s, MinBackoff)"}
	}
	if c.maxElapsed == 0 {
		c.maxElapsed = transportMaxElapsed
	}
	c.maxElapsed = min(c.maxElapsed, transportElapsedCap)
	if c.maxBody == 0 {
		c.maxBody = DefaultMaxBodyBytes
	}
	if c.logger == nil {
		c.logger = slog.Default()
	}
	return c, nil
}

// manages reports whether Transport adds a key to and retries requests of method m.
func (t *Transport) manages(m string) bool {
	if t.Methods == nil {
		return m == http.MethodPost || m == http.MethodPatch
	}
	return slices.Contains(t.Methods, m)
}

// RoundTrip sends req, retrying it under one Idempotency-Key as described on
// Transport. It does not modify req: the key is set on a copy.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	cfg, err := t.config()
	if err != nil {
		closeRequestBody(req)
		return nil, err
	}
	if !t.manages(req.Method) {
		return cfg.base.RoundTrip(req)
	}
	key, err := cfg.key(req)
	if err != nil {
		closeRequestBody(req)
		return nil, err
	}
	c := &clientCall{cfg: cfg, key: key, start: time.Now()}
	// A shallow copy with its own header map: the key is all that changes, and
	// nothing of req is written (deep copies would cost on every request).
	c.req = new(http.Request)
	*c.req = *req
	c.req.Header = make(http.Header, len(req.Header)+1)
	for k, v := range req.Header {
		c.req.Header[k] = v
	}
	c.req.Header[HeaderKey] = []string{key}
	if _, set := req.Header[idem.HeaderDeadline]; !set {
		c.req.Header[idem.HeaderDeadline] = []string{idem.FormatDeadline(cfg.deadline(req.Context(), c.start))}
	}
	if err := c.prepareBody(req); err != nil {
		return nil, err
	}
	c.req.Body = c.first
	return c.run()
}

// CloseIdleConnections closes Base's idle connections, if it can; http.Client's
// method of the same name calls it.
func (t *Transport) CloseIdleConnections() {
	base := t.Base
	if base == nil {
		base = http.DefaultTransport
	}
	if ci, ok := base.(interface{ CloseIdleConnections() }); ok {
		ci.CloseIdleConnections()
	}
}

// deadlineGrace is how long after the last retry may start (MaxElapsed) an attempt
// is still expected to reach the server: the Idem-Deadline of a request whose
// context has no deadline is its start + MaxElapsed + deadlineGrace.
const deadlineGrace = time.Minute

// deadline returns the Idem-Deadline of a request that starts at start: when its
// caller gives up. That is ctx's deadline if it has one (an http.Client's Timeout
// sets one), else the end of the retry budget (see "The deadline" on Transport).
func (c transportConfig) deadline(ctx context.Context, start time.Time) time.Time {
	d := start.Add(c.maxElapsed + deadlineGrace)
	if dl, ok := ctx.Deadline(); ok && dl.Before(d) {
		return dl
	}
	return d
}

// key returns the Idempotency-Key of req's logical request; see Transport.
func (c transportConfig) key(req *http.Request) (string, error) {
	if k := req.Header.Get(HeaderKey); k != "" {
		return k, idemkey.ValidateHeader(k)
	}
	if parent, ok := KeyFrom(req.Context()); ok {
		return idemkey.Derive(parent, req.Method+" "+req.URL.Host+req.URL.Path), nil
	}
	if c.newKey == nil {
		return idemkey.NewV7(), nil
	}
	k := c.newKey(req)
	if err := idemkey.ValidateHeader(k); err != nil {
		return "", &idem.InputError{Field: "Transport.NewKey", Reason: "returned a bad key: " + err.Error(),
			Fix: "return 1 to 255 printable ASCII characters, such as idemkey.NewV7()"}
	}
	return k, nil
}

// clientCall is one logical request: the attempts sent under one key.
type clientCall struct {
	cfg   transportConfig
	key   string
	start time.Time
	req   *http.Request // a copy of the caller's request, with its own header and the key
	// first is the body of the first attempt; getBody, when not nil, returns the body
	// of a later one (nil: there is no body). once is set when the body cannot be sent
	// twice.
	first   io.ReadCloser
	getBody func() (io.ReadCloser, error)
	once    bool
}

// prepareBody makes the body of req replayable on c.req, or marks c as single-shot.
// It closes req.Body if it fails.
func (c *clientCall) prepareBody(req *http.Request) error {
	c.first, c.getBody = req.Body, req.GetBody
	if req.Body == nil || req.Body == http.NoBody || req.GetBody != nil {
		return nil
	}
	buf, err := io.ReadAll(io.LimitReader(req.Body, c.cfg.maxBody+1))
	if err != nil {
		closeRequestBody(req)
		return fmt.Errorf("idemhttp: reading the request body to make it replayable: %w", err)
	}
	if int64(len(buf)) > c.cfg.maxBody {
		// Stream what was read, then the rest, in a single attempt.
		c.first = struct {
			io.Reader
			io.Closer
		}{io.MultiReader(bytes.NewReader(buf), req.Body), req.Body}
		c.once = true
		c.logDebug("idemhttp: request body exceeds MaxBodyBytes and cannot be replayed; sending it once, without retries",
			"max_body_bytes", c.cfg.maxBody)
		return nil
	}
	closeRequestBody(req)
	c.getBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(buf)), nil }
	c.first, _ = c.getBody()
	c.req.GetBody = c.getBody // lets Base rewind too (HTTP/2 retries after GOAWAY)
	c.req.ContentLength = int64(len(buf))
	return nil
}

// run sends the attempts and returns the final outcome.
func (c *clientCall) run() (*http.Response, error) {
	ctx := c.req.Context()
	for n := 1; ; n++ {
		attempt := c.req
		if n > 1 {
			// A fresh copy: Base may still hold the previous one (writing its body).
			// The header map is shared, and never written again.
			a := *c.req
			if c.getBody != nil {
				b, err := c.getBody()
				if err != nil {
					return nil, c.fail(fmt.Errorf("replaying the request body (GetBody): %w", err), n-1)
				}
				a.Body = b
			}
			attempt = &a
		}
		attempt, span := c.startAttempt(attempt, n)
		resp, err := c.cfg.base.RoundTrip(attempt)
		endAttempt(span, resp, err)
		if err != nil && ctx.Err() != nil {
			return nil, err // the caller gave up: not a failure to report or retry
		}
		if !c.retryable(resp, err, n) {
			return c.finish(resp, err, n)
		}
		pause, ok := c.delay(ctx, n, resp, time.Now())
		if !ok {
			return c.finish(resp, err, n)
		}
		c.logRetry(n, resp, err, pause)
		if resp != nil {
			discardResponse(resp)
		}
		if !wait.Sleep(ctx, pause) {
			return nil, ctx.Err()
		}
	}
}

// finish returns the final outcome after n attempts.
func (c *clientCall) finish(resp *http.Response, err error, n int) (*http.Response, error) {
	if err != nil {
		return nil, c.fail(err, n)
	}
	if resp.Header == nil {
		resp.Header = make(http.Header)
	}
	resp.Header.Set(HeaderAttempts, strconv.Itoa(n))
	return resp, nil
}

// fail wraps the last error with what the caller needs to retry it safely: the key.
func (c *clientCall) fail(err error, n int) error {
	return &idem.BackendError{Backend: "http", Op: "round trip",
		Err: fmt.Errorf("%s %s://%s%s: gave up after %d attempt(s) with Idempotency-Key %q: %w",
			c.req.Method, c.req.URL.Scheme, c.req.URL.Host, c.req.URL.Path, n, c.key, err)}
}

// Attempts reports how many attempts a Transport made for resp, from its
// HeaderAttempts header: 1 when the first attempt was answered, more after retries, 0
// when resp did not come from a Transport that manages its method.
func Attempts(resp *http.Response) int {
	if resp == nil {
		return 0
	}
	n, err := strconv.Atoi(resp.Header.Get(HeaderAttempts))
	if err != nil || n < 0 {
		return 0
	}
	return n
}

// WithKey returns a context carrying key as the parent of the requests made with it:
// a Transport derives each request's Idempotency-Key from it, as
// idemkey.Derive(key, method+" "+host+path), instead of making a new one. Use it for
// the calls one logical operation makes (a message being handled, a saga step), so
// that when the operation runs again after a crash its calls carry the same keys and
// the servers replay their first answers instead of acting twice. It is idem.WithKey:
// the middleware, the inbox and effect.Fence set it for the code they run.
//
// One logical operation, one lineage: two calls with the same method, host and path
// under one parent get the same key, and the second is answered with the first's
// response. When an operation calls one endpoint several times for distinct effects,
// give each call its own lineage (WithKey(ctx, idemkey.Derive(key, "line-3"))) or
// its own header. A header set by the caller always wins.
func WithKey(ctx context.Context, key string) context.Context { return idem.WithKey(ctx, key) }

// KeyFrom returns the key lineage WithKey put in ctx, if any (an empty key is none).
func KeyFrom(ctx context.Context) (string, bool) { return idem.KeyFrom(ctx) }

// closeRequestBody honours RoundTrip's contract to close the body, even on errors.
func closeRequestBody(req *http.Request) {
	if req.Body != nil {
		_ = req.Body.Close()
	}
}
