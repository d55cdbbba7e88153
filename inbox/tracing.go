package inbox

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/internal/otelx"
)

// The spans of a delivery (see the package documentation): idem.inbox.process, a
// consumer span whose parent is the trace context the message carries, from the
// batch's start to the delivery's ack or nak; idem.inbox.apply, its child, around
// each run of the handler; or, for a delivery whose key was already applied,
// idem.inbox.duplicate, a short root span linked to the message's context.

var (
	kindConsumer = trace.WithSpanKind(trace.SpanKindConsumer)
	newRoot      = trace.WithNewRoot()
	verdictNames = [...]string{pending: "pending", processed: "processed", duplicate: "duplicate", retry: "retried", dead: "dead_lettered"}
)

// parentOf returns the trace context d carries in its headers, or ctx's when it
// carries none.
func (c *Consumer[Tx]) parentOf(ctx context.Context, d idem.Delivery) trace.SpanContext {
	return trace.SpanContextFromContext(c.tr.Extract(ctx, d.Headers))
}

// spanOptions are the options of a batch's process spans: made once per batch, so
// starting a delivery's span allocates no options.
func spanOptions(start time.Time) []trace.SpanStartOption {
	return []trace.SpanStartOption{kindConsumer, trace.WithTimestamp(start)}
}

// startProcess starts it's idem.inbox.process span, once, and returns ctx with it.
func (c *Consumer[Tx]) startProcess(ctx context.Context, it *item) context.Context {
	if it.span != nil {
		return trace.ContextWithSpan(ctx, it.span)
	}
	if it.parent.IsValid() {
		ctx = trace.ContextWithRemoteSpanContext(ctx, it.parent)
	}
	ctx, it.span = c.tr.Start(ctx, otelx.SpanInboxProcess, it.opts...)
	c.deliveryAttrs(it.span, it)
	return ctx
}

// startApply starts the idem.inbox.apply span of one run of it's handler, a child
// of its process span. Under a process span that does not record (no provider, or
// not sampled) it starts none: the handler's context carries the process span's
// trace context, which is all a non-recording child would give it.
func (c *Consumer[Tx]) startApply(ctx context.Context, it *item) (context.Context, trace.Span) {
	if it.opts == nil { // tracing is off: no spans, the message's context passed on
		if it.parent.IsValid() {
			ctx = trace.ContextWithRemoteSpanContext(ctx, it.parent)
		}
		return ctx, otelx.NoSpan
	}
	ctx = c.startProcess(ctx, it)
	if !it.span.IsRecording() {
		return ctx, otelx.NoSpan
	}
	it.span.SetAttributes(otelx.Outcome(idem.Acquired))
	return c.tr.Start(ctx, otelx.SpanInboxApply, otelx.KindInternal...)
}

// endSpan ends it's span once it is settled (settleErr is the ack's or nak's
// failure): the process span with its verdict, or, for a duplicate, a suppressed
// span linked to the message's context, with no apply span under it.
func (c *Consumer[Tx]) endSpan(ctx context.Context, it *item, settleErr error) {
	if it.opts == nil {
		return // tracing is off
	}
	switch {
	case it.span != nil:
	case it.v == duplicate:
		opts := append([]trace.SpanStartOption{newRoot}, it.opts...)
		if it.parent.IsValid() {
			opts = append(opts, trace.WithLinks(trace.Link{SpanContext: it.parent}))
		}
		_, it.span = c.tr.Start(ctx, otelx.SpanInboxSuppress, opts...)
		c.deliveryAttrs(it.span, it)
	default:
		c.startProcess(ctx, it)
	}
	span := it.span
	if span.IsRecording() {
		span.SetAttributes(otelx.KeyVerdict.String(verdictNames[it.v]))
		switch it.v {
		case duplicate:
			span.SetAttributes(otelx.KeyDuplicate.Bool(true), otelx.Outcome(idem.Replayed))
		case retry, dead:
			if it.err != nil {
				span.RecordError(it.err)
				span.SetStatus(codes.Error, it.err.Error())
			}
		}
		if settleErr != nil {
			span.AddEvent("settle failed", trace.WithAttributes(attribute.String("error", settleErr.Error())))
		}
	}
	span.End()
}

// deliveryAttrs sets the delivery's attributes on span, if it is recording.
func (c *Consumer[Tx]) deliveryAttrs(span trace.Span, it *item) {
	if !span.IsRecording() {
		return
	}
	otelx.MessageAttrs(span, c.sys, "process", it.d.Message, it.d.Position)
	span.SetAttributes(otelx.KeyMessagingConsumer.String(c.cfg.Consumer), otelx.KeyScope.String(c.cfg.Consumer))
	if it.key != "" {
		span.SetAttributes(otelx.KeyKey.String(it.key))
	}
	if it.d.Attempt > 0 {
		span.SetAttributes(otelx.KeyAttempt.Int(it.d.Attempt))
	}
}
