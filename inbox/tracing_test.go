package inbox_test

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/inbox"
	"github.com/idemhq/idem/internal/otelx"
	"github.com/idemhq/idem/internal/testsvc"
)

// replaySpans returns the ended idem.inbox.replay spans, oldest first.
func replaySpans(exp *tracetest.InMemoryExporter) []tracetest.SpanStub {
	var out []tracetest.SpanStub
	for _, s := range exp.GetSpans() {
		if s.Name == otelx.SpanInboxReplay {
			out = append(out, s)
		}
	}
	return out
}

// wantReplayAttrs fails t unless s has each attribute with the value given.
func wantReplayAttrs(t *testing.T, s tracetest.SpanStub, want map[attribute.Key]any) {
	t.Helper()
	got := map[attribute.Key]any{}
	for _, a := range s.Attributes {
		got[a.Key] = a.Value.AsInterface()
	}
	for k, w := range want {
		if g, ok := got[k]; !ok || fmt.Sprint(g) != fmt.Sprint(w) {
			t.Errorf("replay span: %s = %v (present %v), want %v; attributes %v", k, g, ok, w, s.Attributes)
		}
	}
}

// wantLinkTo fails t unless s's one link is to sc.
func wantLinkTo(t *testing.T, s tracetest.SpanStub, sc trace.SpanContext) {
	t.Helper()
	if len(s.Links) != 1 || s.Links[0].SpanContext.TraceID() != sc.TraceID() || s.Links[0].SpanContext.SpanID() != sc.SpanID() {
		t.Errorf("replay span links %v, want one link to the dead letter's context %s/%s", s.Links, sc.TraceID(), sc.SpanID())
	}
}

// TestReplayTraced: a dead letter's replay, direct or requested, is an
// idem.inbox.replay span linked to the trace context stored with the letter, under
// which the handler runs, with its outcome; the failure log of a requested replay
// carries the span's trace and span ids.
func TestReplayTraced(t *testing.T) {
	t.Parallel()
	b := sqliteBundle(t)
	ctx := context.Background()
	tr := newTracer(t)
	tp, exp := tr.tp, tr.exp
	prop := propagation.TraceContext{}

	// Three orders, each sent under a producer span of its own, dead-lettered.
	msgs := []idem.Message{why(1, "downstream down"), why(2, "downstream down"), why(3, "downstream down")}
	origins := sendTraced(tp, msgs)
	ids := deadLetter(t, b, "ledger", msgs...)
	exp.Reset()

	var calls handlerCalls
	var broken atomic.Bool // order-3 fails while set
	broken.Store(true)
	var mu sync.Mutex
	handlerSpans := map[string]trace.SpanContext{}
	h := gate(&calls, func(m idem.Message) error { return nil })
	handler := func(hctx context.Context, tx *sql.Tx, m idem.Message) error {
		mu.Lock()
		handlerSpans[m.ID] = trace.SpanContextFromContext(hctx)
		mu.Unlock()
		if m.ID == "order-00003" && broken.Load() {
			return errTransient
		}
		return h(hctx, tx, m)
	}
	logs := &testsvc.Buffer{}
	log := slog.New(otelx.LogHandler(slog.NewJSONHandler(logs, nil)))
	fb := newFakeBroker()
	c := newConsumer(t, b, fb, handler, inbox.Config{ReplayPollInterval: -1, TracerProvider: tp, Propagator: prop, Logger: log})

	// A direct replay under the operator's span: its child, linked to the order.
	octx, op := tp.Tracer("ops").Start(ctx, "operator replays order-1")
	if applied, err := c.Replay(octx, ids["order-00001"]); err != nil || !applied {
		t.Fatalf("Replay(order-1) = %v, %v; want applied", applied, err)
	}
	op.End()
	spans := replaySpans(exp)
	if len(spans) != 1 {
		t.Fatalf("%d replay spans after one replay, want 1", len(spans))
	}
	first := spans[0]
	if first.Parent.SpanID() != op.SpanContext().SpanID() || first.SpanContext.TraceID() != op.SpanContext().TraceID() {
		t.Errorf("the replay span's parent is %s, want the operator's span %s", first.Parent.SpanID(), op.SpanContext().SpanID())
	}
	if first.SpanKind != trace.SpanKindConsumer {
		t.Errorf("the replay span is a %s span, want consumer", first.SpanKind)
	}
	wantLinkTo(t, first, origins["order-00001"])
	wantReplayAttrs(t, first, map[attribute.Key]any{otelx.KeyReplayResult: "applied", otelx.KeyOutcome: "acquired",
		otelx.KeyKey: "order-00001", otelx.KeyScope: "ledger", otelx.KeyDeadLetter: ids["order-00001"],
		otelx.KeyReplayRequested: false, otelx.KeyMessagingID: "order-00001", otelx.KeyMessagingDest: "orders",
		otelx.KeyMessagingConsumer: "ledger"})
	if got := handlerSpans["order-00001"]; got.SpanID() != first.SpanContext.SpanID() {
		t.Errorf("the handler ran under span %s, want the replay span %s", got.SpanID(), first.SpanContext.SpanID())
	}

	// Replayed again: no open dead letter any more.
	exp.Reset()
	if _, err := c.Replay(ctx, ids["order-00001"]); !errors.Is(err, inbox.ErrNoDeadLetter) {
		t.Fatalf("second Replay(order-1) = %v, want ErrNoDeadLetter", err)
	}
	if spans := replaySpans(exp); len(spans) != 1 {
		t.Fatalf("%d replay spans after a replay of a closed letter, want 1", len(spans))
	} else {
		wantReplayAttrs(t, spans[0], map[attribute.Key]any{otelx.KeyReplayResult: "gone"})
		if spans[0].Parent.IsValid() {
			t.Errorf("a replay with no span in its context has parent %s, want none", spans[0].Parent.SpanID())
		}
	}

	// order-2 was applied meanwhile, through the broker: its replay is a duplicate.
	fb.Publish(ctx, why(2, ""))
	drain(t, c, fb)
	exp.Reset()
	if applied, err := c.Replay(ctx, ids["order-00002"]); err != nil || applied {
		t.Fatalf("Replay(order-2) = %v, %v; want already applied", applied, err)
	}
	if spans := replaySpans(exp); len(spans) != 1 {
		t.Fatalf("%d replay spans, want 1", len(spans))
	} else {
		wantReplayAttrs(t, spans[0], map[attribute.Key]any{otelx.KeyReplayResult: "already_applied",
			otelx.KeyDuplicate: true, otelx.KeyOutcome: "replayed"})
		wantLinkTo(t, spans[0], origins["order-00002"])
	}

	// order-3's replay is requested; the poll's first try fails, the second applies it.
	a := inbox.NewDeadLetterAdmin(b.txdb)
	if _, err := a.RequestReplay(ctx, []int64{ids["order-00003"]}, "fixed"); err != nil {
		t.Fatal(err)
	}
	exp.Reset()
	if n, err := c.ReplayRequested(ctx); err != nil || n != 0 {
		t.Fatalf("ReplayRequested with a failing handler = %d, %v; want 0, nil", n, err)
	}
	spans = replaySpans(exp)
	if len(spans) != 1 {
		t.Fatalf("%d replay spans after a failed requested replay, want 1", len(spans))
	}
	failed := spans[0]
	wantLinkTo(t, failed, origins["order-00003"])
	wantReplayAttrs(t, failed, map[attribute.Key]any{otelx.KeyReplayResult: "failed", otelx.KeyReplayRequested: true,
		otelx.KeyDeadLetter: ids["order-00003"]})
	if failed.Status.Code != codes.Error || !strings.Contains(failed.Status.Description, errTransient.Error()) {
		t.Errorf("the failed replay's status is %v, want an error with %q", failed.Status, errTransient)
	}
	// The failure's log line names the replay span.
	line := logLineWith(t, logs.String(), "inbox: requested replay failed")
	if line["trace_id"] != failed.SpanContext.TraceID().String() || line["span_id"] != failed.SpanContext.SpanID().String() {
		t.Errorf("log line %v: want trace_id %s and span_id %s of the failed replay", line,
			failed.SpanContext.TraceID(), failed.SpanContext.SpanID())
	}

	broken.Store(false)
	exp.Reset()
	if n, err := c.ReplayRequested(ctx); err != nil || n != 1 {
		t.Fatalf("ReplayRequested = %d, %v; want 1, nil", n, err)
	}
	if spans := replaySpans(exp); len(spans) != 1 {
		t.Fatalf("%d replay spans, want 1", len(spans))
	} else {
		wantReplayAttrs(t, spans[0], map[attribute.Key]any{otelx.KeyReplayResult: "applied", otelx.KeyReplayRequested: true})
		if spans[0].Status.Code == codes.Error {
			t.Errorf("the applied replay's status is %v", spans[0].Status)
		}
	}
	exactLedgerIDs(t, b.db, "order-00001", "order-00002", "order-00003")
}

// logLineWith returns the JSON log line of logs whose msg is msg, failing t if none.
func logLineWith(t *testing.T, logs, msg string) map[string]any {
	t.Helper()
	sc := bufio.NewScanner(strings.NewReader(logs))
	for sc.Scan() {
		var rec map[string]any
		if err := json.Unmarshal(sc.Bytes(), &rec); err == nil && rec["msg"] == msg {
			return rec
		}
	}
	t.Fatalf("no log line %q in:\n%s", msg, logs)
	return nil
}
