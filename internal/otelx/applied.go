package otelx

import (
	"context"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// The inbox records, as the result of each key it applies, the trace context of the
// delivery that applied it, so a later duplicate's span can link to that delivery.
// It is stored as a W3C traceparent, whatever propagator the application uses: the
// bytes never leave idem's own table.

var w3c = propagation.TraceContext{}

// maxTraceParent bounds what AppliedBy parses: a traceparent is 55 bytes.
const maxTraceParent = 128

// AppliedBy returns sc as the bytes the inbox records with a key, or nil when sc is
// not a sampled, valid span context (nothing would be linked to it).
func AppliedBy(sc trace.SpanContext) []byte {
	if !sc.IsValid() || !sc.IsSampled() {
		return nil
	}
	c := propagation.MapCarrier{}
	w3c.Inject(trace.ContextWithSpanContext(context.Background(), sc), c)
	return []byte(c["traceparent"])
}

// ParseAppliedBy is AppliedBy's inverse: the span context recorded with a key, or
// an invalid one when b holds none (a key recorded with tracing off, or a result
// that is not a traceparent).
func ParseAppliedBy(b []byte) trace.SpanContext {
	if len(b) == 0 || len(b) > maxTraceParent {
		return trace.SpanContext{}
	}
	ctx := w3c.Extract(context.Background(), propagation.MapCarrier{"traceparent": string(b)})
	return trace.SpanContextFromContext(ctx)
}
