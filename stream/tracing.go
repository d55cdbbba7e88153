package stream

import (
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemhq/idem/internal/otelx"
)

// endAppend ends an Append's span with the event as stored (its seq) or err.
func endAppend(span trace.Span, channel string, e Event, err error) {
	if span.IsRecording() {
		span.SetAttributes(otelx.KeyChannel.String(channel))
		if e.Key != "" {
			span.SetAttributes(otelx.KeyKey.String(e.Key))
		}
		if err == nil {
			span.SetAttributes(otelx.KeySeq.Int64(int64(e.Seq)))
		}
	}
	otelx.End(span, err)
}

// endPush ends the span of one batch written to a client: the channel, the seqs
// of the batch, how many events were written, and why the connection stopped if
// it did.
func endPush(span trace.Span, channel string, batch []cached, written int, r closeReason) {
	if span.IsRecording() {
		span.SetAttributes(otelx.KeyChannel.String(channel), otelx.KeyEvents.Int(written))
		if len(batch) > 0 {
			span.SetAttributes(otelx.KeyFirstSeq.Int64(int64(batch[0].e.Seq)), otelx.KeySeq.Int64(int64(batch[len(batch)-1].e.Seq)))
		}
		if written < len(batch) && r.label != "" {
			span.SetStatus(codes.Error, "stopped after "+r.label)
		}
	}
	span.End()
}
