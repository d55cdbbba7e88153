package saga

import (
	"context"
	"errors"

	"go.opentelemetry.io/otel/trace"

	"github.com/idemhq/idem/effect"
	"github.com/idemhq/idem/internal/otelx"
)

// startAdvance starts the idem.saga.advance span of inst, a child of ctx's span,
// unless no span can record.
func (o *Orchestrator[Tx]) startAdvance(ctx context.Context, inst *Instance) (context.Context, trace.Span) {
	if o.tr.Off() {
		return ctx, otelx.NoSpan
	}
	ctx, span := o.tr.Start(ctx, otelx.SpanSagaAdvance, otelx.KindInternal...)
	if span.IsRecording() {
		span.SetAttributes(otelx.KeySagaID.String(inst.ID), otelx.KeySaga.String(inst.Saga))
	}
	return ctx, span
}

// endAdvance ends an advance span with the state the saga was left in.
func endAdvance(span trace.Span, inst *Instance, err error) {
	if span.IsRecording() {
		span.SetAttributes(otelx.KeySagaState.String(inst.State))
	}
	otelx.End(span, err)
}

// startStep starts the span called name (idem.saga.step or idem.saga.compensate)
// of one attempt of inst's step, a child of the advance span in ctx.
func (o *Orchestrator[Tx]) startStep(ctx context.Context, name string, inst *Instance, step string) (context.Context, trace.Span) {
	if o.tr.Off() {
		return ctx, otelx.NoSpan
	}
	ctx, span := o.tr.Start(ctx, name, otelx.KindInternal...)
	if span.IsRecording() {
		span.SetAttributes(otelx.KeySagaID.String(inst.ID), otelx.KeyStep.String(step), otelx.KeyAttempt.Int(inst.Attempts+1))
	}
	return ctx, span
}

// endStep ends a step's span; err marks it failed, unless it is
// effect.ErrInProgress (another orchestrator's call holds the step: not a failure).
func endStep(span trace.Span, err error) {
	if span.IsRecording() && !errors.Is(err, effect.ErrInProgress) {
		otelx.Fail(span, err)
	}
	span.End()
}
