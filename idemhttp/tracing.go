package idemhttp

import (
	"net/http"
	"strconv"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/internal/metrics"
	"github.com/idemhq/idem/internal/otelx"
)

// startSpan starts the span of a keyed request: a child of the span already in its
// context (an outer otelhttp handler, say), else a server span whose parent is the
// caller's traceparent, if it sent one. r is returned with the span in its context,
// unless the span carries nothing (no provider, no incoming trace), which spares the
// request's copy.
func (c *mwCore) startSpan(r *http.Request) (*http.Request, trace.Span) {
	ctx := r.Context()
	if c.tr.Off() {
		// No span can record: pass on the caller's trace context, if any.
		if !trace.SpanContextFromContext(ctx).IsValid() {
			if ctx = c.tr.Propagator().Extract(ctx, propagation.HeaderCarrier(r.Header)); trace.SpanContextFromContext(ctx).IsValid() {
				r = r.WithContext(ctx)
			}
		}
		return r, otelx.NoSpan
	}
	kind := otelx.KindInternal
	if !trace.SpanContextFromContext(ctx).IsValid() {
		ctx = c.tr.Propagator().Extract(ctx, propagation.HeaderCarrier(r.Header))
		kind = otelx.KindServer
	}
	ctx, span := c.tr.Start(ctx, otelx.SpanHTTPServer, kind...)
	if span.IsRecording() {
		span.SetAttributes(semconv.HTTPRequestMethodKey.String(r.Method), semconv.URLPathKey.String(r.URL.Path))
	}
	if span.SpanContext().IsValid() {
		r = r.WithContext(ctx)
	}
	return r, span
}

// endSpan ends a keyed request's span with the claim's outcome, as the middleware
// counted it.
func endSpan(span trace.Span, o metrics.HTTPOutcome) {
	if span.IsRecording() {
		switch o {
		case metrics.HTTPExecuted:
			span.SetAttributes(otelx.Outcome(idem.Acquired))
		case metrics.HTTPReplayed:
			span.SetAttributes(otelx.Outcome(idem.Replayed), otelx.KeyDuplicate.Bool(true))
		case metrics.HTTPConflict:
			span.SetAttributes(otelx.Outcome(idem.InProgress), otelx.KeyDuplicate.Bool(true))
		case metrics.HTTPMismatch:
			span.SetAttributes(otelx.Outcome(idem.Mismatch))
		case metrics.HTTPRejected:
			span.SetStatus(codes.Error, "request rejected before its key was claimed")
		case metrics.HTTPError:
			span.SetStatus(codes.Error, "idempotency store failed or stored response unreadable")
		}
	}
	span.End()
}

// startAttempt starts the client span of a Transport's attempt n and returns the
// attempt's request carrying it, with its trace context in the headers (injected
// into the call's own copy of the caller's headers).
//
// The Transport's configuration is built per call, so its tracer is made only when
// a span can record.
func (c *clientCall) startAttempt(req *http.Request, n int) (*http.Request, trace.Span) {
	if otelx.Off(c.cfg.tp) {
		// No span can record: pass on the caller's trace context, if any.
		if trace.SpanContextFromContext(req.Context()).IsValid() {
			otelx.Propagator(c.cfg.prop).Inject(req.Context(), propagation.HeaderCarrier(c.req.Header))
		}
		return req, otelx.NoSpan
	}
	tr := otelx.New(c.cfg.tp, c.cfg.prop)
	ctx, span := tr.Start(req.Context(), otelx.SpanHTTPClient, otelx.KindClient...)
	if span.IsRecording() {
		span.SetAttributes(otelx.KeyKey.String(c.key), otelx.KeyAttempt.Int(n),
			semconv.HTTPRequestMethodKey.String(req.Method), semconv.ServerAddressKey.String(req.URL.Hostname()),
			semconv.URLPathKey.String(req.URL.Path))
	}
	if span.SpanContext().IsValid() {
		tr.Propagator().Inject(ctx, propagation.HeaderCarrier(c.req.Header))
		req = req.WithContext(ctx)
	}
	return req, span
}

// endAttempt ends an attempt's span with its response or error.
func endAttempt(span trace.Span, resp *http.Response, err error) {
	if span.IsRecording() {
		switch {
		case err != nil:
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		case resp != nil:
			span.SetAttributes(semconv.HTTPResponseStatusCodeKey.Int(resp.StatusCode))
			if resp.StatusCode >= 500 {
				span.SetStatus(codes.Error, strconv.Itoa(resp.StatusCode))
			}
		}
	}
	span.End()
}
