package otelx_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/idemhq/idem/internal/otelx"
)

// logLine logs one record through LogHandler over a JSON handler and returns it
// decoded.
func logLine(t *testing.T, ctx context.Context, log func(*slog.Logger, context.Context)) map[string]any {
	t.Helper()
	var buf bytes.Buffer
	log(slog.New(otelx.LogHandler(slog.NewJSONHandler(&buf, nil))), ctx)
	var rec map[string]any
	if err := json.Unmarshal(buf.Bytes(), &rec); err != nil {
		t.Fatalf("log line %q: %v", buf.String(), err)
	}
	return rec
}

func TestLogHandlerAddsTraceIDs(t *testing.T) {
	t.Parallel()
	tr := newTracing(t)
	ctx, span := tr.tp.Tracer("test").Start(context.Background(), "work")
	defer span.End()
	sc := span.SpanContext()

	rec := logLine(t, ctx, func(l *slog.Logger, ctx context.Context) {
		l.With("component", "inbox").InfoContext(ctx, "applied", "n", 1)
	})
	if rec[otelx.LogTraceID] != sc.TraceID().String() || rec[otelx.LogSpanID] != sc.SpanID().String() {
		t.Errorf("log line %v: want trace_id %s and span_id %s", rec, sc.TraceID(), sc.SpanID())
	}
	if rec["component"] != "inbox" || rec["n"] != float64(1) || rec["msg"] != "applied" {
		t.Errorf("log line %v lost the record's own attributes", rec)
	}

	// A remote parent (a message's traceparent, no local span) is a trace context too.
	remote := trace.ContextWithRemoteSpanContext(context.Background(), sc)
	rec = logLine(t, remote, func(l *slog.Logger, ctx context.Context) {
		l.LogAttrs(ctx, slog.LevelWarn, "redelivered")
	})
	if rec[otelx.LogTraceID] != sc.TraceID().String() {
		t.Errorf("log line %v under a remote span context: want trace_id %s", rec, sc.TraceID())
	}
}

func TestLogHandlerWithoutSpanAddsNothing(t *testing.T) {
	t.Parallel()
	for name, log := range map[string]func(*slog.Logger, context.Context){
		"no context":       func(l *slog.Logger, _ context.Context) { l.Info("started") },
		"context, no span": func(l *slog.Logger, ctx context.Context) { l.InfoContext(ctx, "started") },
	} {
		rec := logLine(t, context.Background(), log)
		if _, ok := rec[otelx.LogTraceID]; ok {
			t.Errorf("%s: log line %v has a trace_id", name, rec)
		}
		if _, ok := rec[otelx.LogSpanID]; ok {
			t.Errorf("%s: log line %v has a span_id", name, rec)
		}
	}
}

// The record a caller hands to Handle is not changed: a second handler given the
// same record (as a fan-out handler does) does not see the first one's ids.
func TestLogHandlerLeavesRecordAlone(t *testing.T) {
	t.Parallel()
	tr := newTracing(t)
	ctx, span := tr.tp.Tracer("test").Start(context.Background(), "work")
	defer span.End()
	r := slog.NewRecord(time.Now(), slog.LevelInfo, "m", 0)
	r.AddAttrs(slog.Int("a", 1), slog.Int("b", 2), slog.Int("c", 3), slog.Int("d", 4), slog.Int("e", 5), slog.Int("f", 6))
	var buf bytes.Buffer
	if err := otelx.LogHandler(slog.NewJSONHandler(&buf, nil)).Handle(ctx, r); err != nil {
		t.Fatal(err)
	}
	if n := r.NumAttrs(); n != 6 {
		t.Errorf("the caller's record has %d attributes after Handle, want its 6", n)
	}
}
