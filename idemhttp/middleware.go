package idemhttp

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemkey"
	"github.com/idemhq/idem/internal/heartbeat"
	"github.com/idemhq/idem/internal/metrics"
	"github.com/idemhq/idem/internal/otelx"
	"github.com/idemhq/idem/internal/wait"
)

// finishTimeout bounds the store calls made after the handler ran (Complete,
// Release), which run detached from the request so a client that left does not
// stop its result from being recorded.
const finishTimeout = 10 * time.Second

// storeRetryAfter is the Retry-After of a 503 for a failed store: long enough for a
// connection to be re-established, short enough for an interactive client.
const storeRetryAfter = time.Second

// overloadRetryAfter is the Retry-After of a 503 beyond Config.MaxInFlight.
const overloadRetryAfter = time.Second

// Middleware returns the server middleware of the IETF Idempotency-Key draft with
// Stripe's semantics: the first request with a key runs the handler and stores its
// response (status, the Config.ReplayHeaders, body); a retry with the same key gets
// that response again, byte for byte, with Idempotent-Replayed: true. See the
// package documentation for every status it produces.
//
// The handler runs only while the key is claimed in Config.Store. When the store
// fails, the request is answered 503 with Retry-After and the handler does not run:
// running it unclaimed could run it twice, which is what the middleware exists to
// prevent, while a 503 is always safe to retry.
//
// The error is an *idem.InputError naming a bad Config field, or the Registerer's.
func Middleware(cfg Config) (func(http.Handler) http.Handler, error) {
	c, err := newMiddlewareCore(cfg, true)
	if err != nil {
		return nil, err
	}
	c.run = c.runPlain
	c.renewer, _ = c.cfg.Store.(idem.Renewer)
	return c.wrap, nil
}

// mwCore is what the plain and the atomic middleware share: the checks before a
// claim and the answers to duplicates. run claims the key and executes the handler.
type mwCore struct {
	cfg       Config
	allow     []string // canonical ReplayHeaders, but unstorable ones; nil: all but the denied
	fpHeaders []string // canonical FingerprintHeaders
	limit     int
	m         *metrics.HTTP
	// renewer is the store's idem.Renewer, nil when it has none (and in atomic
	// mode, where the claim is a row lock held by the transaction, not a lease).
	renewer idem.Renewer
	// inFlight counts the keyed requests past the Config.MaxInFlight check.
	inFlight atomic.Int64
	// retention is what a claim keeps its record for: Config.Retention, raised to
	// MaxKeyAge + idemkey.MaxSkew while key ages are checked, so that a key the
	// check accepts (dated up to MaxSkew ahead) never outlives its record.
	retention time.Duration
	run       func(next http.Handler, w http.ResponseWriter, r *http.Request, q *mwRequest) metrics.HTTPOutcome
	tr        otelx.Tracer
	// keyHeader is the canonical header that carries the key (Idempotency-Key or
	// Config.KeyHeader), and keyName what errors call the key: it, or the JSON
	// field of Config.KeyJSONField.
	keyHeader, keyName string
}

func newMiddlewareCore(cfg Config, needStore bool) (*mwCore, error) {
	cfg, err := cfg.withDefaults(needStore)
	if err != nil {
		return nil, err
	}
	c := &mwCore{cfg: cfg, limit: int(cfg.MaxBodyBytes), tr: otelx.New(cfg.TracerProvider, cfg.Propagator),
		retention: cfg.Retention, keyHeader: HeaderKey, keyName: HeaderKey}
	switch {
	case cfg.KeyHeader != "":
		c.keyHeader = http.CanonicalHeaderKey(cfg.KeyHeader)
		c.keyName = c.keyHeader
	case cfg.KeyJSONField != "":
		c.keyName = fmt.Sprintf("the body's JSON field %q", cfg.KeyJSONField)
	}
	if cfg.MaxKeyAge > 0 {
		c.retention = max(cfg.Retention, cfg.MaxKeyAge+idemkey.MaxSkew)
	}
	if cfg.ReplayHeaders != nil {
		c.allow = []string{} // an allow-list, even empty; nil stores all but the denied
	}
	for _, h := range cfg.ReplayHeaders {
		// Content-Length is computed from the stored body, never replayed as stored;
		// hop-by-hop headers describe the first response's connection.
		if h = http.CanonicalHeaderKey(h); !unstorable(h) {
			c.allow = append(c.allow, h)
		}
	}
	for _, h := range cfg.FingerprintHeaders {
		c.fpHeaders = append(c.fpHeaders, http.CanonicalHeaderKey(h))
	}
	if c.m, err = metrics.NewHTTP(cfg.Registerer); err != nil {
		return nil, fmt.Errorf("idemhttp: register metrics: %w", err)
	}
	return c, nil
}

func (c *mwCore) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !c.applies(r.Method) {
			next.ServeHTTP(w, r)
			return
		}
		start := c.m.Start()
		c.m.Done(c.serve(next, w, r), start)
	})
}

func (c *mwCore) applies(method string) bool {
	for _, m := range c.cfg.Methods {
		if m == method {
			return true
		}
	}
	return false
}

// serve runs the checks that need no store (key, scope, body), fingerprints the
// request and hands it to run.
func (c *mwCore) serve(next http.Handler, w http.ResponseWriter, r *http.Request) (o metrics.HTTPOutcome) {
	if c.cfg.KeyJSONField != "" {
		return c.serveJSONKey(next, w, r)
	}
	keys := r.Header[c.keyHeader]
	if len(keys) == 0 && !c.cfg.RequireKey {
		next.ServeHTTP(w, r)
		return metrics.HTTPPassthrough
	}
	r, span := c.startSpan(r)
	defer func() { endSpan(span, o) }()
	switch {
	case len(keys) == 0:
		writeProblem(w, http.StatusBadRequest, ProblemInvalidKey, "Missing "+c.keyHeader,
			"idem: "+c.keyHeader+" is missing: this endpoint requires one; send one unique key per operation (e.g. a UUID) and the same key on every retry", 0)
		return metrics.HTTPRejected
	case len(keys) > 1:
		writeProblem(w, http.StatusBadRequest, ProblemInvalidKey, "Invalid "+c.keyHeader,
			fmt.Sprintf("idem: %s is sent %d times: send it exactly once", c.keyHeader, len(keys)), 0)
		return metrics.HTTPRejected
	}
	if !c.validKey(w, keys[0]) {
		return metrics.HTTPRejected
	}
	scope, o, ok := c.keyScope(w, r, span, keys[0])
	if !ok {
		return o
	}
	// Entered before the body is read: a request over the cap costs no memory.
	q, o, read := c.admit(next, w, r)
	if !read {
		return o
	}
	defer c.leave()
	return c.claimAndRun(next, w, r, q, scope, keys[0])
}

// admit enters the in-flight count (Config.MaxInFlight), then reads r's body
// (readBody). When it returns read, the caller leaves the count with leave once
// the request is answered; otherwise the request has been answered (refused as
// over the cap, or as readBody says), with o its outcome, and is counted no more.
func (c *mwCore) admit(next http.Handler, w http.ResponseWriter, r *http.Request) (q *mwRequest, o metrics.HTTPOutcome, read bool) {
	if c.cfg.MaxInFlight > 0 && !c.enter(w) {
		return nil, metrics.HTTPRejected, false
	}
	defer func() {
		if !read { // also when a handler a large body passes through to panics
			c.leave()
		}
	}()
	return c.readBody(next, w, r)
}

// leave leaves the in-flight count that admit entered.
func (c *mwCore) leave() {
	if c.cfg.MaxInFlight > 0 {
		c.inFlight.Add(-1)
	}
}

// readBody reads r's body, up to the limit, into a pooled request. read is false
// when the request has been answered instead, with o its outcome: a body that
// failed to read, or one over the limit, refused or passed through whole.
func (c *mwCore) readBody(next http.Handler, w http.ResponseWriter, r *http.Request) (q *mwRequest, o metrics.HTTPOutcome, read bool) {
	q = getMWRequest()
	oversize, err := q.readBody(r, c.limit)
	switch {
	case err != nil:
		putMWRequest(q)
		return nil, c.badBody(w, err), false
	case oversize && c.cfg.Oversize == PassThrough:
		r.Body = q.prefixedBody(r.Body)
		next.ServeHTTP(w, r)
		putMWRequest(q)
		return nil, metrics.HTTPPassthrough, false
	case oversize:
		putMWRequest(q)
		return nil, c.tooLarge(w), false
	}
	return q, 0, true
}

// serveJSONKey is serve for Config.KeyJSONField: the body is read first, since it
// holds the key.
func (c *mwCore) serveJSONKey(next http.Handler, w http.ResponseWriter, r *http.Request) (o metrics.HTTPOutcome) {
	// Every request may carry a key: each one counts while its body is read.
	q, o, read := c.admit(next, w, r)
	if !read {
		return o
	}
	defer c.leave()
	key, found, err := jsonKey(q.body, c.cfg.KeyJSONField)
	if err == nil && !found && !c.cfg.RequireKey {
		r.Body = q.prefixedBody(r.Body) // all of it: the rest is at its end
		next.ServeHTTP(w, r)
		putMWRequest(q)
		return metrics.HTTPPassthrough
	}
	r, span := c.startSpan(r)
	defer func() { endSpan(span, o) }()
	switch {
	case err != nil:
		putMWRequest(q)
		writeProblem(w, http.StatusBadRequest, ProblemInvalidKey, "Invalid idempotency key",
			fmt.Sprintf("idem: this endpoint takes the idempotency key from %s, and %v", c.keyName, err), 0)
		return metrics.HTTPRejected
	case !found:
		putMWRequest(q)
		writeProblem(w, http.StatusBadRequest, ProblemInvalidKey, "Missing idempotency key",
			fmt.Sprintf("idem: the body has no top-level field %q, this endpoint's idempotency key: send a JSON object with one unique %q per operation, the same on every retry", c.cfg.KeyJSONField, c.cfg.KeyJSONField), 0)
		return metrics.HTTPRejected
	}
	if !c.validKey(w, key) {
		putMWRequest(q)
		return metrics.HTTPRejected
	}
	scope, o, ok := c.keyScope(w, r, span, key)
	if !ok {
		putMWRequest(q)
		return o
	}
	return c.claimAndRun(next, w, r, q, scope, key)
}

// validKey answers 400 for a key idemkey.ValidateHeader refuses, naming where it
// came from.
func (c *mwCore) validKey(w http.ResponseWriter, key string) bool {
	err := idemkey.ValidateHeader(key)
	if err == nil {
		return true
	}
	if ie, ok := errors.AsType[*idem.InputError](err); ok && c.keyName != HeaderKey {
		e := *ie
		e.Field = c.keyName
		err = &e
	}
	title := "Invalid " + c.keyHeader
	if c.cfg.KeyJSONField != "" {
		title = "Invalid idempotency key"
	}
	writeProblem(w, http.StatusBadRequest, ProblemInvalidKey, title, err.Error(), 0)
	return false
}

// keyScope runs the checks of a key that need no store (its age, the deadline) and
// returns the request's scope; false when it answered the request.
func (c *mwCore) keyScope(w http.ResponseWriter, r *http.Request, span trace.Span, key string) (string, metrics.HTTPOutcome, bool) {
	if o, refused := c.refuse(w, r, key); refused {
		return "", o, false
	}
	scope, err := c.cfg.Scope(r)
	if err != nil {
		writeProblem(w, http.StatusBadRequest, ProblemInvalidScope, "Invalid request scope", err.Error(), 0)
		return "", metrics.HTTPRejected, false
	}
	otelx.SetKey(span, idem.Key{Scope: scope, ID: key})
	return scope, 0, true
}

// enter counts a request in flight, or answers 503 beyond Config.MaxInFlight.
func (c *mwCore) enter(w http.ResponseWriter) bool {
	if c.inFlight.Add(1) > int64(c.cfg.MaxInFlight) {
		c.inFlight.Add(-1)
		writeProblem(w, http.StatusServiceUnavailable, ProblemOverloaded, "Too many requests in flight",
			fmt.Sprintf("idem: %d requests with an idempotency key are already in flight, the most this server runs at once, so this one was not run: retry with the same key after Retry-After seconds", c.cfg.MaxInFlight),
			overloadRetryAfter)
		return false
	}
	return true
}

func (c *mwCore) tooLarge(w http.ResponseWriter) metrics.HTTPOutcome {
	writeProblem(w, http.StatusRequestEntityTooLarge, ProblemBodyTooLarge, "Request body too large",
		fmt.Sprintf("idem: the request body is larger than %d bytes, the most this endpoint stores for an idempotent request: send a smaller body", c.limit), 0)
	return metrics.HTTPRejected
}

// claimAndRun fingerprints the request whose body q holds and hands it to run.
func (c *mwCore) claimAndRun(next http.Handler, w http.ResponseWriter, r *http.Request, q *mwRequest, scope, key string) metrics.HTTPOutcome {
	q.fingerprint(r, c.fpHeaders)
	q.claim = idem.Claim{Key: idem.Key{Scope: scope, ID: key}, Fingerprint: q.fp[:],
		Lease: c.cfg.Lease, Retention: c.retention}
	o := c.run(next, w, r, q)
	putMWRequest(q) // not reached when the handler panics: q may still be in use
	return o
}

func (c *mwCore) badBody(w http.ResponseWriter, err error) metrics.HTTPOutcome {
	if mbe, ok := errors.AsType[*http.MaxBytesError](err); ok {
		// An outer http.MaxBytesReader set a lower limit than ours.
		writeProblem(w, http.StatusRequestEntityTooLarge, ProblemBodyTooLarge, "Request body too large",
			fmt.Sprintf("idem: the request body is larger than %d bytes: send a smaller body", mbe.Limit), 0)
		return metrics.HTTPRejected
	}
	writeProblem(w, http.StatusBadRequest, "about:blank", "Bad Request",
		"idem: the request body could not be read: "+err.Error(), 0)
	return metrics.HTTPRejected
}

// runPlain is run for Middleware: claim, then execute or answer the duplicate.
func (c *mwCore) runPlain(next http.Handler, w http.ResponseWriter, r *http.Request, q *mwRequest) metrics.HTTPOutcome {
	ctx := r.Context()
	res, err := c.cfg.Store.Claim(ctx, q.claim)
	if err == nil && res.Outcome == idem.InProgress && c.cfg.Wait > 0 {
		res, err = c.wait(ctx, res, func() (idem.Result, error) { return c.cfg.Store.Claim(ctx, q.claim) })
	}
	switch {
	case err != nil:
		return c.storeFailed(w, r, "claim", q.claim.Key, err)
	case res.Outcome != idem.Acquired:
		return c.answerDuplicate(w, r, q.claim.Key, res)
	}
	otelx.SetOutcome(trace.SpanFromContext(ctx), res.Outcome, res.Token)
	return c.execute(next, w, r, q, res.Token)
}

// execute runs the handler under the claimed key and stores its response.
//
// The handler's context is detached from the client's (context.WithoutCancel keeps
// its values, drops its cancellation): a client that disconnects mid-request must not
// abort the first execution halfway, since its retry is expected to replay the
// result. The handler finishes, the result is stored, and writing it to the gone
// client simply fails.
func (c *mwCore) execute(next http.Handler, w http.ResponseWriter, r *http.Request, q *mwRequest, token uint64) metrics.HTTPOutcome {
	k := q.claim.Key
	rec := &q.rec
	rec.reset(w, c.limit, *c.cfg.StoreServerErrors, false)
	hr := q.handlerRequest(context.WithoutCancel(r.Context()), r)
	q.snapshotHeader(w.Header())
	returned := false
	hb := heartbeat.Start(c.renewer, k, token, c.cfg.Lease, c.cfg.Logger)
	defer func() {
		if !returned {
			// The handler panicked (net/http recovers it): give the key back so a
			// retry runs the request again rather than waiting out the lease.
			hb.Stop()
			c.release(r, k, token)
		}
	}()
	next.ServeHTTP(rec, hr)
	returned = true
	hb.Stop()

	rec.finishHeader()
	var stored []byte
	switch {
	case rec.oversize:
		// Streamed to the client, too large to store: the key keeps a marker, so a
		// retry is told so instead of running the request a second time.
		stored = encodeTooLarge(rec.status, rec.size)
	case rec.direct:
		// 429 or a 5xx not to be stored: streamed, and the key is given back so a
		// retry runs again.
		c.release(r, k, token)
		return metrics.HTTPExecuted
	default:
		var ok bool
		if stored, ok = c.encode(q); !ok {
			stored = encodeTooLarge(rec.status, int64(len(rec.buf))+MaxStoredHeaderBytes)
		}
	}
	// The handler's detached context, without a timeout of its own: a timer per
	// request costs more than the memory store's whole Complete, and the network
	// stores bound their calls themselves (dial, read and statement timeouts).
	if err := c.cfg.Store.Complete(hr.Context(), k, token, stored); err != nil {
		// The effect happened: the client still gets its response. A retry is not
		// replayed: it gets 409 until the lease ends, then runs the handler again.
		c.cfg.Logger.WarnContext(r.Context(), "idem: the response could not be stored for replay",
			"key", k.String(), "err", err)
	}
	if !rec.oversize {
		rec.writeHeld()
	}
	return metrics.HTTPExecuted
}

// encode returns the stored form of q's held response, in a slice of its exact size
// that the store may keep; false when its headers are too large to store.
func (c *mwCore) encode(q *mwRequest) ([]byte, bool) {
	h := q.rec.Header()
	c.storedNames(q, h)
	return encodeResponse(q.rec.status, h, q.names, q.rec.buf)
}

func (c *mwCore) release(r *http.Request, k idem.Key, token uint64) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), finishTimeout)
	defer cancel()
	if err := c.cfg.Store.Release(ctx, k, token); err != nil {
		// The lease runs out anyway; until then a retry gets 409.
		c.cfg.Logger.WarnContext(r.Context(), "idem: releasing the key failed", "key", k.String(), "err", err)
	}
}

// wait polls with try while the key is in progress and Config.Wait has not run
// out, or until the client leaves.
func (c *mwCore) wait(ctx context.Context, res idem.Result, try func() (idem.Result, error)) (idem.Result, error) {
	return wait.While(ctx, c.cfg.Wait, res, inProgress, try)
}

func inProgress(res idem.Result) bool { return res.Outcome == idem.InProgress }

// answerDuplicate answers a claim that was not acquired: the replay, 409 or 422.
func (c *mwCore) answerDuplicate(w http.ResponseWriter, r *http.Request, k idem.Key, res idem.Result) metrics.HTTPOutcome {
	switch res.Outcome {
	case idem.Replayed:
		err := replayResponse(w, res.Record.Result, c.allow)
		if tl, ok := errors.AsType[*errTooLarge](err); ok {
			writeProblem(w, http.StatusInternalServerError, ProblemResponseTooLarge, "Response too large to replay",
				fmt.Sprintf("idem: the request with Idempotency-Key %q was run and answered %d, but its response (over %d bytes) was too large to store, so it cannot be replayed; it is not run again: use a new key only to run a new request", k.ID, tl.status, c.limit), 0)
			return metrics.HTTPReplayed
		}
		if err != nil {
			c.cfg.Logger.ErrorContext(r.Context(), "idem: a stored response could not be replayed", "key", k.String(), "err", err)
			writeProblem(w, http.StatusInternalServerError, ProblemCorruptRecord, "Stored response unreadable",
				"idem: the response stored for this Idempotency-Key could not be decoded; it will not be replayed", 0)
			return metrics.HTTPError
		}
		return metrics.HTTPReplayed
	case idem.Mismatch:
		writeProblem(w, http.StatusUnprocessableEntity, ProblemMismatch, "Idempotency-Key reused",
			fmt.Sprintf("idem: Idempotency-Key %q was already used for a different request (method, path, query, body or fingerprinted headers differ): use a new key for a new request", k.ID), 0)
		return metrics.HTTPMismatch
	}
	// In progress: tell the client when the holder's lease ends at the latest.
	writeProblem(w, http.StatusConflict, ProblemInProgress, "Request in progress",
		fmt.Sprintf("idem: a request with Idempotency-Key %q is still being processed: retry with the same key after Retry-After seconds", k.ID),
		max(time.Until(res.Record.ExpiresAt), time.Second))
	return metrics.HTTPConflict
}

// storeFailed answers a failed claim without running the handler: 400 for input the
// store refused (such as a scope longer than 255 bytes), 503 otherwise.
func (c *mwCore) storeFailed(w http.ResponseWriter, r *http.Request, op string, k idem.Key, err error) metrics.HTTPOutcome {
	if ie, ok := errors.AsType[*idem.InputError](err); ok {
		writeProblem(w, http.StatusBadRequest, ProblemInvalidScope, "Invalid idempotency key or scope", ie.Error(), 0)
		return metrics.HTTPRejected
	}
	if r.Context().Err() == nil {
		c.cfg.Logger.WarnContext(r.Context(), "idem: the idempotency store failed; answered 503 without running the handler",
			"op", op, "key", k.String(), "err", err)
	}
	writeProblem(w, http.StatusServiceUnavailable, ProblemStoreUnavailable, "Idempotency store unavailable",
		"idem: the idempotency store could not be reached, so the request was not run: retry with the same Idempotency-Key after Retry-After seconds", storeRetryAfter)
	return metrics.HTTPError
}
