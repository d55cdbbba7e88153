package effect

import (
	"context"
	"errors"

	"go.opentelemetry.io/otel/trace"

	"github.com/idemhq/idem/idemkey"
	"github.com/idemhq/idem/internal/otelx"
)

// startDo starts the idem.effect.do span of key and step, a child of ctx's span,
// unless no span can record.
func (f *Fence[Tx]) startDo(ctx context.Context, key, step string) (context.Context, trace.Span) {
	if f.tr.Off() {
		return ctx, otelx.NoSpan
	}
	ctx, span := f.tr.Start(ctx, otelx.SpanEffectDo, otelx.KindInternal...)
	if span.IsRecording() {
		span.SetAttributes(otelx.KeyKey.String(key), otelx.KeyStep.String(step),
			otelx.KeyDerivedKey.String(idemkey.Derive(key, step)))
	}
	return ctx, span
}

// traceOutcome sets the fence's outcome on span: idem.effect.outcome, and
// idem.duplicate for an effect that was not run again here.
func traceOutcome(span trace.Span, outcome string) {
	if !span.IsRecording() {
		return
	}
	span.SetAttributes(otelx.KeyEffectOutcome.String(outcome))
	if outcome == "replayed" || outcome == "in_progress" {
		span.SetAttributes(otelx.KeyDuplicate.Bool(true))
	}
}

// traceClaim sets the token this worker holds on span, and whether it took the
// effect over.
func traceClaim(span trace.Span, c claim) {
	if span.IsRecording() && c.token > 0 {
		span.SetAttributes(otelx.KeyToken.Int64(c.token), otelx.KeyTakeover.Bool(c.takeover))
	}
}

// endDo ends a Do span; err marks it failed, unless it is ErrInProgress (another
// worker holds the effect: an outcome, not a failure).
func endDo(span trace.Span, err error) {
	if span.IsRecording() && !errors.Is(err, ErrInProgress) {
		otelx.Fail(span, err)
	}
	span.End()
}

// reconcile asks Config.Reconcile, in an idem.effect.reconcile span.
func (f *Fence[Tx]) reconcile(ctx context.Context, step, derived string) ([]byte, bool, error) {
	if f.tr.Off() {
		return f.cfg.Reconcile(ctx, step, derived)
	}
	ctx, span := f.tr.Start(ctx, otelx.SpanEffectReconcile, otelx.KindInternal...)
	result, happened, err := f.cfg.Reconcile(ctx, step, derived)
	if span.IsRecording() {
		span.SetAttributes(otelx.KeyStep.String(step), otelx.KeyDerivedKey.String(derived), otelx.KeyHappened.Bool(happened))
	}
	otelx.End(span, err)
	return result, happened, err
}
