package inbox

import (
	"context"
	"errors"
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
// idem.inbox.duplicate, a short span under the message's context too, linked to the
// process span of the delivery that applied it. That span's context is recorded as
// the key's result in the effect's transaction (otelx.AppliedBy), so the link holds
// across processes and restarts; a key applied while tracing was off, or by
// sequence number (WithSequences keeps a watermark, not a row per key), has none to
// link to.

var (
	kindConsumer = trace.WithSpanKind(trace.SpanKindConsumer)
	verdictNames = [...]string{pending: "pending", processed: "processed", duplicate: "duplicate", retry: "retried", dead: "dead_lettered"}
)

// itemTrace is what a delivery carries for tracing.
type itemTrace struct {
	parent  trace.SpanContext       // the trace context found in the headers, or ctx's
	span    trace.Span              // the delivery's span, once started
	opts    []trace.SpanStartOption // the batch's span options; nil: tracing is off
	applier trace.SpanContext       // a duplicate's: the span of the delivery that applied it, if known
}

// traces returns the tracing state of a batch's deliveries, one per delivery, or
// nil when there is nothing to trace or pass on: no span can record (Tracer.Off)
// and no delivery carries a trace context. The options are made once per batch, so
// starting a delivery's span allocates none.
func (c *Consumer[Tx]) traces(ctx context.Context, ds []idem.Delivery, start time.Time) []itemTrace {
	var out []itemTrace
	var opts []trace.SpanStartOption
	if !c.tr.Off() {
		out, opts = make([]itemTrace, len(ds)), []trace.SpanStartOption{kindConsumer, trace.WithTimestamp(start)}
	}
	for i, d := range ds {
		parent := trace.SpanContextFromContext(c.tr.Extract(ctx, d.Headers))
		if out == nil && parent.IsValid() {
			out = make([]itemTrace, len(ds))
		}
		if out != nil {
			out[i] = itemTrace{parent: parent, opts: opts}
		}
	}
	return out
}

// startProcess starts it's idem.inbox.process span, once, and returns ctx with it.
func (c *Consumer[Tx]) startProcess(ctx context.Context, it *item) context.Context {
	t := it.tr
	if t.span != nil {
		return trace.ContextWithSpan(ctx, t.span)
	}
	if t.parent.IsValid() {
		ctx = trace.ContextWithRemoteSpanContext(ctx, t.parent)
	}
	name := otelx.SpanInboxProcess
	if it.v == duplicate { // known before its span starts (endSpan): named for it at once
		name = otelx.SpanInboxSuppress
	}
	ctx, t.span = c.tr.Start(ctx, name, t.opts...)
	c.deliveryAttrs(t.span, it)
	return ctx
}

// startApply starts the idem.inbox.apply span of one run of it's handler, a child
// of its process span. Under a process span that does not record (no provider, or
// not sampled) it starts none: the handler's context carries the process span's
// trace context, which is all a non-recording child would give it.
func (c *Consumer[Tx]) startApply(ctx context.Context, it *item) (context.Context, trace.Span) {
	switch {
	case it.tr == nil:
		return ctx, otelx.NoSpan
	case it.tr.opts == nil: // tracing is off: no spans, the message's context passed on
		if it.tr.parent.IsValid() {
			ctx = trace.ContextWithRemoteSpanContext(ctx, it.tr.parent)
		}
		return ctx, otelx.NoSpan
	}
	ctx = c.startProcess(ctx, it)
	if !it.tr.span.IsRecording() {
		return ctx, otelx.NoSpan
	}
	it.tr.span.SetAttributes(otelx.Outcome(idem.Acquired))
	return c.tr.Start(ctx, otelx.SpanInboxApply, otelx.KindInternal...)
}

// endSpan ends it's span once it is settled (settleErr is the ack's or nak's
// failure): the process span with its verdict, or, for a duplicate, a suppressed
// span linked to the delivery that applied the message, with no apply span under it.
func (c *Consumer[Tx]) endSpan(ctx context.Context, it *item, settleErr error) {
	t := it.tr
	if t == nil || t.opts == nil {
		return // tracing is off
	}
	c.startProcess(ctx, it) // if not started yet; a duplicate's is renamed below
	span := t.span
	if span.IsRecording() {
		span.SetAttributes(otelx.KeyVerdict.String(verdictNames[it.v]))
		switch it.v {
		case duplicate:
			span.SetName(otelx.SpanInboxSuppress)
			if applier := c.applier(ctx, it); applier.IsValid() {
				span.AddLink(trace.Link{SpanContext: applier, Attributes: []attribute.KeyValue{otelx.KeyLinkAppliedBy.Bool(true)}})
			}
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

// applier returns the span of the delivery that applied duplicate it: as its claim
// replayed it, or else (the batch path records keys without reading them) as the
// store's record holds it. An invalid span context when unknown.
func (c *Consumer[Tx]) applier(ctx context.Context, it *item) trace.SpanContext {
	if it.tr.applier.IsValid() || c.inspect == nil || it.key == "" || c.bySequence(it.d) {
		return it.tr.applier
	}
	rctx, cancel := context.WithTimeout(ctx, applierReadTimeout)
	defer cancel()
	rec, err := c.inspect.Inspect(rctx, it.claim.Key)
	if err != nil {
		return trace.SpanContext{} // a link is worth no more than a bounded read
	}
	return otelx.ParseAppliedBy(rec.Result)
}

// applierReadTimeout bounds the read of a traced duplicate's record.
const applierReadTimeout = 2 * time.Second

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

// startReplay starts the idem.inbox.replay span of dead letter id, a child of ctx's
// span; none while tracing is off. The dead letter's own trace context is linked
// once its row is read (traceLetter): the replay is a new operation, started by an
// operator or a program, not a step of the message's first delivery, so it joins
// that trace by a link, not as a child.
func (c *Consumer[Tx]) startReplay(ctx context.Context, id int64, requested bool) (context.Context, trace.Span) {
	if c.tr.Off() {
		return ctx, otelx.NoSpan
	}
	ctx, span := c.tr.Start(ctx, otelx.SpanInboxReplay, kindConsumer)
	if span.IsRecording() {
		span.SetAttributes(otelx.KeyDeadLetter.Int64(id), otelx.KeyReplayRequested.Bool(requested),
			otelx.KeyMessagingConsumer.String(c.cfg.Consumer), otelx.KeyScope.String(c.cfg.Consumer))
	}
	return ctx, span
}

// traceLetter links span to the trace context stored with dl's message (its
// traceparent header) and sets the message's attributes, if span is recording.
func (c *Consumer[Tx]) traceLetter(span trace.Span, dl DeadLetter) {
	if !span.IsRecording() {
		return
	}
	if sc := trace.SpanContextFromContext(c.tr.Extract(context.Background(), dl.Message.Headers)); sc.IsValid() {
		span.AddLink(trace.Link{SpanContext: sc})
	}
	otelx.MessageAttrs(span, c.sys, "process", dl.Message, dl.Position)
}

// endReplay ends a replay's span with its result (otelx.KeyReplayResult).
func endReplay(span trace.Span, applied bool, err error) {
	if span.IsRecording() {
		result := "applied"
		switch {
		case errors.Is(err, ErrNoDeadLetter):
			result = "gone"
		case err != nil:
			result = "failed"
			otelx.Fail(span, err)
		case !applied:
			result = "already_applied"
			span.SetAttributes(otelx.KeyDuplicate.Bool(true))
		}
		span.SetAttributes(otelx.KeyReplayResult.String(result))
	}
	span.End()
}
