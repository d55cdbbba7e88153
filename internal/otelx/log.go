package otelx

import (
	"context"
	"log/slog"

	"go.opentelemetry.io/otel/trace"
)

// Log attribute keys of the trace context, as OpenTelemetry's log data model and
// most log collectors name them.
const (
	LogTraceID = "trace_id"
	LogSpanID  = "span_id"
)

// LogHandler returns h with the trace context of each record's context added: a
// record logged with a context whose span context is valid (LogAttrs(ctx, …),
// InfoContext and the like, under an active span or a remote parent) gets trace_id
// and span_id attributes, as 32 and 16 hex digits; a record without one is passed on
// as it is. The ids land inside any group opened with WithGroup, since a handler
// cannot add top-level attributes after one.
func LogHandler(h slog.Handler) slog.Handler {
	if _, ok := h.(logHandler); ok {
		return h
	}
	return logHandler{h}
}

type logHandler struct{ h slog.Handler }

func (l logHandler) Enabled(ctx context.Context, level slog.Level) bool {
	return l.h.Enabled(ctx, level)
}

func (l logHandler) Handle(ctx context.Context, r slog.Record) error {
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		// A copy of a record shares its attributes' storage: add to a clone, so the
		// caller's record (which other handlers may also get) is left as it was.
		r = r.Clone()
		r.AddAttrs(slog.String(LogTraceID, sc.TraceID().String()), slog.String(LogSpanID, sc.SpanID().String()))
	}
	return l.h.Handle(ctx, r)
}

func (l logHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return logHandler{l.h.WithAttrs(attrs)}
}

func (l logHandler) WithGroup(name string) slog.Handler {
	return logHandler{l.h.WithGroup(name)}
}
