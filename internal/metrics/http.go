package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// HTTPOutcome is what the idempotency middleware did with one request: the outcome
// label of idem_http_requests_total.
type HTTPOutcome uint8

// The outcomes of a request through the middleware.
const (
	// HTTPExecuted: the key was claimed and the handler ran.
	HTTPExecuted HTTPOutcome = iota
	// HTTPReplayed: a stored response was replayed; the handler did not run.
	HTTPReplayed
	// HTTPConflict: the key was in progress (409).
	HTTPConflict
	// HTTPMismatch: the key was used for another request (422).
	HTTPMismatch
	// HTTPRejected: refused before execution (400 key or scope error, 413).
	HTTPRejected
	// HTTPPassthrough: no key (or an oversized body under PassThrough); run without
	// idempotency.
	HTTPPassthrough
	// HTTPError: the store failed or a stored response could not be read (503, 500).
	HTTPError
	httpOutcomes
)

var httpOutcomeNames = [httpOutcomes]string{"executed", "replayed", "conflict", "mismatch", "rejected", "passthrough", "error"}

// String returns the outcome's label value.
func (o HTTPOutcome) String() string {
	if o < httpOutcomes {
		return httpOutcomeNames[o]
	}
	return "unknown"
}

// HTTPRefusal is why the middleware refused a request before claiming its key: the
// reason label of idem_http_refused_total.
type HTTPRefusal uint8

// The reasons of a refusal.
const (
	// RefusedStaleKey: the key's time is older than the maximum key age (410).
	RefusedStaleKey HTTPRefusal = iota
	// RefusedFutureKey: the key's time is beyond the clock-skew allowance (400).
	RefusedFutureKey
	// RefusedUntimedKey: the key carries no time and timed keys are required (400).
	RefusedUntimedKey
	// RefusedDeadline: the request's Idem-Deadline had passed (412).
	RefusedDeadline
	httpRefusals
)

var httpRefusalNames = [httpRefusals]string{"stale_key", "future_key", "untimed_key", "deadline"}

// String returns the reason's label value.
func (r HTTPRefusal) String() string {
	if r < httpRefusals {
		return httpRefusalNames[r]
	}
	return "unknown"
}

// HTTP records the requests of the idempotency middleware. Its methods are safe on a
// nil receiver, which records nothing and does not read the clock.
type HTTP struct {
	requests [httpOutcomes]prometheus.Counter
	duration [httpOutcomes]prometheus.Observer
	refused  [httpRefusals]prometheus.Counter
}

// NewHTTP registers idem_http_requests_total{outcome} and
// idem_http_request_duration_seconds{outcome} on reg. A nil reg returns a nil *HTTP.
// Several middlewares (or a gateway) on one registry share the collectors.
func NewHTTP(reg prometheus.Registerer) (*HTTP, error) {
	return newRequests(reg, "idem_http", "Requests through the idempotency middleware",
		"Time from the request entering the idempotency middleware to its response, by outcome.",
		"Requests the idempotency middleware refused without running them")
}

// NewGRPC registers the same series for the gRPC server interceptor, named
// idem_grpc_requests_total{outcome}, idem_grpc_request_duration_seconds{outcome}
// and idem_grpc_refused_total{reason}; the outcomes mean what they mean for HTTP
// (conflict: the key was in progress; mismatch: used for another request).
func NewGRPC(reg prometheus.Registerer) (*HTTP, error) {
	return newRequests(reg, "idem_grpc", "Unary calls through the gRPC idempotency interceptor",
		"Time from the call entering the gRPC idempotency interceptor to its response, by outcome.",
		"Calls the gRPC idempotency interceptor refused without running them")
}

func newRequests(reg prometheus.Registerer, prefix, requestsHelp, durationHelp, refusedHelp string) (*HTTP, error) {
	if reg == nil {
		return nil, nil
	}
	r := &registrar{reg: reg}
	requests := r.counters(prefix+"_requests_total",
		requestsHelp+", by outcome (executed, replayed, conflict, mismatch, rejected, passthrough, error).",
		"outcome")
	duration := r.seconds(prefix+"_request_duration_seconds",
		durationHelp,
		0.0001, "outcome")
	refused := r.counters(prefix+"_refused_total",
		refusedHelp+", by reason (stale_key, future_key, untimed_key, deadline); each is also counted as outcome rejected.",
		"reason")
	if r.err != nil {
		return nil, r.err
	}
	// Resolve every series once: the request path then indexes an array instead of
	// hashing label values, and every outcome is exported (at 0) from the start.
	m := &HTTP{}
	for o := range httpOutcomes {
		m.requests[o] = requests.WithLabelValues(o.String())
		m.duration[o] = duration.WithLabelValues(o.String())
	}
	for why := range httpRefusals {
		m.refused[why] = refused.WithLabelValues(why.String())
	}
	return m, nil
}

// Start returns the start time to pass to Done, or the zero time when m is nil.
func (m *HTTP) Start() time.Time {
	if m == nil {
		return time.Time{}
	}
	return time.Now()
}

// Done records one request that started at start and ended with outcome o.
func (m *HTTP) Done(o HTTPOutcome, start time.Time) {
	if m == nil || o >= httpOutcomes {
		return
	}
	m.requests[o].Inc()
	m.duration[o].Observe(time.Since(start).Seconds())
}

// Refused records one request refused for reason why (it is also Done as
// HTTPRejected).
func (m *HTTP) Refused(why HTTPRefusal) {
	if m == nil || why >= httpRefusals {
		return
	}
	m.refused[why].Inc()
}
