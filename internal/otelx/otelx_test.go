package otelx_test

import (
	"context"
	"database/sql"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemhttp"
	"github.com/idemhq/idem/idemmem"
	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/idemsqlite"
	"github.com/idemhq/idem/inbox"
	"github.com/idemhq/idem/internal/otelx"
)

const traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"

func TestInjectCopiesAndReplaces(t *testing.T) {
	t.Parallel()
	tr := otelx.New(noop.NewTracerProvider(), propagation.TraceContext{})
	caller := map[string]string{"k": "v", "Traceparent": "00-ffffffffffffffffffffffffffffffff-ffffffffffffffff-01"}
	before := maps.Clone(caller)

	// No span context: the headers as they are, the same map.
	if got := tr.Inject(context.Background(), caller); !maps.Equal(got, before) {
		t.Fatalf("without a span context Inject returned %v, want %v", got, before)
	}

	ctx := tr.Extract(context.Background(), map[string]string{"traceparent": traceparent})
	got := tr.Inject(ctx, caller)
	if !maps.Equal(caller, before) {
		t.Fatalf("Inject wrote the caller's map: %v", caller)
	}
	want := map[string]string{"k": "v", "traceparent": traceparent}
	if !maps.Equal(got, want) {
		t.Fatalf("Inject returned %v, want %v (the stale Traceparent replaced)", got, want)
	}
}

func TestExtractMatchesNamesWithoutCase(t *testing.T) {
	t.Parallel()
	tr := otelx.New(noop.NewTracerProvider(), propagation.TraceContext{})
	for _, name := range []string{"traceparent", "Traceparent", "TRACEPARENT"} {
		sc := trace.SpanContextFromContext(tr.Extract(context.Background(), map[string]string{name: traceparent}))
		if sc.TraceID().String() != "0af7651916cd43dd8448eb211c80319c" || !sc.IsRemote() {
			t.Errorf("header %q: extracted %v, want the remote trace 0af7…", name, sc)
		}
	}
	// Hostile values are refused by the propagator: no context.
	for _, v := range []string{"", "garbage", strings.Repeat("0", 4096), "00-00000000000000000000000000000000-b7ad6b7169203331-01"} {
		if sc := trace.SpanContextFromContext(tr.Extract(context.Background(), map[string]string{"traceparent": v})); sc.IsValid() {
			t.Errorf("traceparent %.40q gave a valid context %v", v, sc)
		}
	}
}

// TestPositionAttributes: each adapter's position becomes idem.position, plus the
// semantic conventions' attributes where they define some (Kafka, RabbitMQ); a
// position that only looks like one sets none of them.
func TestPositionAttributes(t *testing.T) {
	tr := newTracing(t)
	m := idem.Message{ID: "m", Topic: "orders"}
	for _, c := range []struct {
		pos  string
		want map[attribute.Key]any
	}{
		{"partition 3 offset 1017", map[attribute.Key]any{otelx.KeyPosition: "partition 3 offset 1017", otelx.KeyMessagingPartition: "3", otelx.KeyMessagingOffset: 1017}},
		{"queue orders delivery tag 42", map[attribute.Key]any{otelx.KeyPosition: "queue orders delivery tag 42", otelx.KeyRabbitMQDeliveryTag: 42}},
		{"stream seq 9", map[attribute.Key]any{otelx.KeyPosition: "stream seq 9"}},
		{"1700000000000-0", map[attribute.Key]any{otelx.KeyPosition: "1700000000000-0"}},
		{"partition x offset 1", map[attribute.Key]any{otelx.KeyPosition: "partition x offset 1"}},
		{"queue q delivery tag -1", map[attribute.Key]any{otelx.KeyPosition: "queue q delivery tag -1"}},
	} {
		tr.exp.Reset()
		_, span := tr.tp.Tracer("t").Start(context.Background(), "process")
		otelx.MessageAttrs(span, "x", "process", m, c.pos)
		span.End()
		got := tr.exp.GetSpans()[0]
		wantAttrs(t, got, c.want)
		for _, a := range got.Attributes {
			if _, ok := c.want[a.Key]; !ok && (a.Key == otelx.KeyMessagingPartition || a.Key == otelx.KeyMessagingOffset || a.Key == otelx.KeyRabbitMQDeliveryTag) {
				t.Errorf("position %q set %s = %v, want none", c.pos, a.Key, a.Value.AsInterface())
			}
		}
	}
}

// TestHelpersCostNothingUntraced: with a non-recording span the attribute helpers
// allocate nothing.
func TestHelpersCostNothingUntraced(t *testing.T) {
	_, span := noop.NewTracerProvider().Tracer("t").Start(context.Background(), "x")
	m := idem.Message{ID: "m", Topic: "orders"}
	allocs := testing.AllocsPerRun(100, func() {
		otelx.SetKey(span, idem.Key{Scope: "s", ID: "k"})
		otelx.SetOutcome(span, idem.Acquired, 7)
		otelx.MessageAttrs(span, "nats", "process", m, "partition 3 offset 1017")
		otelx.Fail(span, context.Canceled)
	})
	if allocs != 0 {
		t.Fatalf("the helpers allocated %.0f times on a non-recording span, want 0", allocs)
	}
}

// TestMiddlewareUnderOuterSpan: behind an outer instrumented handler (a span already
// in the request's context) the middleware's span is an internal child of it, and
// the request's traceparent header is not used.
func TestMiddlewareUnderOuterSpan(t *testing.T) {
	t.Parallel()
	tr := newTracing(t)
	store, err := idemmem.New(idemmem.Config{})
	if err != nil {
		t.Fatal(err)
	}
	mw, err := idemhttp.Middleware(idemhttp.Config{Store: store, TracerProvider: tr.tp, Propagator: tr.prop})
	if err != nil {
		t.Fatal(err)
	}
	h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	outer := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, span := tr.tp.Tracer("outer").Start(r.Context(), "outer", trace.WithSpanKind(trace.SpanKindServer))
		defer span.End()
		h.ServeHTTP(w, r.WithContext(ctx))
	})
	req := httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader("{}"))
	req.Header.Set(idemhttp.HeaderKey, "k-1")
	req.Header.Set("traceparent", traceparent)
	rec := httptest.NewRecorder()
	outer.ServeHTTP(rec, req)
	if rec.Code != http.StatusNoContent {
		t.Fatalf("status %d", rec.Code)
	}
	span := tr.one(t, otelx.SpanHTTPServer)
	wantChild(t, span, tr.one(t, "outer"))
	if span.SpanKind != trace.SpanKindInternal {
		t.Errorf("the middleware's span is %s under an outer span, want internal", span.SpanKind)
	}
}

// TestGlobalProviderFollowed: a component without a TracerProvider uses the global
// one. While the application has set none, it starts no span but passes the
// caller's trace context on (to what the handler enqueues or calls); once the
// application sets one, even after the component was built, its spans record.
// Not parallel: it sets the process's global provider.
func TestGlobalProviderFollowed(t *testing.T) {
	if !otelx.New(nil, nil).Off() {
		t.Skip("the global TracerProvider was set by an earlier run of this test (-count > 1)")
	}
	var seen trace.SpanContext
	mw, err := idemhttp.Middleware(idemhttp.Config{Store: mustMem(t), Propagator: propagation.TraceContext{}})
	if err != nil {
		t.Fatal(err)
	}
	h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen = trace.SpanContextFromContext(r.Context())
		w.WriteHeader(http.StatusNoContent)
	}))
	send := func(key string) {
		req := httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader("{}"))
		req.Header.Set(idemhttp.HeaderKey, key)
		req.Header.Set("traceparent", traceparent)
		h.ServeHTTP(httptest.NewRecorder(), req)
	}
	send("k-1")
	if seen.TraceID().String() != "0af7651916cd43dd8448eb211c80319c" || seen.SpanID().String() != "b7ad6b7169203331" {
		t.Fatalf("untraced, the handler saw trace context %s/%s, want the caller's", seen.TraceID(), seen.SpanID())
	}

	tr := newTracing(t)
	otel.SetTracerProvider(tr.tp)
	if otelx.New(nil, nil).Off() {
		t.Fatal("Off after the global provider was set")
	}
	send("k-2")
	span := tr.one(t, otelx.SpanHTTPServer)
	if span.Parent.SpanID().String() != "b7ad6b7169203331" || seen.SpanID() != span.SpanContext.SpanID() {
		t.Fatalf("with the global provider set, the span's parent is %s and the handler saw %s, want the caller's and the span's",
			span.Parent.SpanID(), seen.SpanID())
	}
}

func mustMem(t *testing.T) *idemmem.Store {
	t.Helper()
	s, err := idemmem.New(idemmem.Config{})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestInboxPassesContextUntraced: with a provider whose spans never record, the
// inbox starts no span but its handler's context still carries the trace context
// of the message, so what the handler calls continues the producer's trace.
func TestInboxPassesContextUntraced(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store, err := idemsqlite.Open(ctx, filepath.Join(t.TempDir(), "inbox.db"), idemsqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	txdb, err := idemsql.SQLDB(ctx, store.DB())
	if err != nil {
		t.Fatal(err)
	}
	var seen []trace.SpanContext
	handle := func(ctx context.Context, _ *sql.Tx, _ idem.Message) error {
		seen = append(seen, trace.SpanContextFromContext(ctx))
		return nil
	}
	c, err := inbox.New(ctx, nopSource{}, txdb, store, handle, inbox.Config{Consumer: "c",
		TracerProvider: noop.NewTracerProvider(), Propagator: propagation.TraceContext{}})
	if err != nil {
		t.Fatal(err)
	}
	c.Process(ctx, []idem.Delivery{
		{Message: idem.Message{ID: "m-1", Topic: "t", Headers: map[string]string{"traceparent": traceparent}}, Settler: nopSettler{}},
		{Message: idem.Message{ID: "m-2", Topic: "t"}, Settler: nopSettler{}},
	})
	if len(seen) != 2 || seen[0].SpanID().String() != "b7ad6b7169203331" || seen[1].IsValid() {
		t.Fatalf("the handlers saw %v, want the message's context, then none", seen)
	}
}

type nopSource struct{}

func (nopSource) Receive(ctx context.Context, _ int) ([]idem.Delivery, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}
func (nopSource) Close() error { return nil }

// TestTransportSpanPerAttempt: each attempt of idemhttp.Transport is its own client
// span, with idem.attempt and the same idem.key, and sends its own traceparent.
func TestTransportSpanPerAttempt(t *testing.T) {
	t.Parallel()
	tr := newTracing(t)
	var got []http.Header
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = append(got, r.Header.Clone())
		if len(got) == 1 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusCreated)
	}))
	defer srv.Close()
	client := &http.Client{Transport: &idemhttp.Transport{MinBackoff: time.Millisecond, TracerProvider: tr.tp, Propagator: tr.prop}}
	ctx, root := tr.tp.Tracer("t").Start(context.Background(), "caller")
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL, strings.NewReader("{}"))
	req.Header.Set(idemhttp.HeaderKey, "k-9")
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	root.End()
	attempts := tr.named(otelx.SpanHTTPClient)
	if len(attempts) != 2 || len(got) != 2 {
		t.Fatalf("%d attempt spans and %d requests, want 2 and 2", len(attempts), len(got))
	}
	caller := tr.one(t, "caller")
	for i, a := range attempts {
		wantChild(t, a, caller)
		wantAttrs(t, a, map[attribute.Key]any{otelx.KeyKey: "k-9", otelx.KeyAttempt: i + 1})
		want := fmt.Sprintf("00-%s-%s-01", a.SpanContext.TraceID(), a.SpanContext.SpanID())
		if tp := got[i].Get("Traceparent"); tp != want {
			t.Errorf("attempt %d sent traceparent %q, want its span's %q", i+1, tp, want)
		}
	}
	if v, _ := attr(attempts[0], "http.response.status_code"); v.AsInt64() != 503 || attempts[0].Status.Code.String() != "Error" {
		t.Errorf("the first attempt's span has status code %v and status %v, want 503 and Error", v.AsInterface(), attempts[0].Status)
	}
}

func TestAppliedByRoundTrip(t *testing.T) {
	sc := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{1, 2, 3}, SpanID: trace.SpanID{4, 5, 6}, TraceFlags: trace.FlagsSampled,
	})
	b := otelx.AppliedBy(sc)
	if got := otelx.ParseAppliedBy(b); got.TraceID() != sc.TraceID() || got.SpanID() != sc.SpanID() || !got.IsRemote() {
		t.Fatalf("ParseAppliedBy(%q) = %v, want %v (remote)", b, got, sc)
	}
	if b := otelx.AppliedBy(trace.SpanContext{}); b != nil {
		t.Errorf("AppliedBy(invalid) = %q, want nil", b)
	}
	unsampled := sc.WithTraceFlags(0)
	if b := otelx.AppliedBy(unsampled); b != nil {
		t.Errorf("AppliedBy(unsampled) = %q, want nil: nothing recorded it", b)
	}
	for _, junk := range []string{"", "{}", "00-zz-yy-01", string(make([]byte, 4096))} {
		if got := otelx.ParseAppliedBy([]byte(junk)); got.IsValid() {
			t.Errorf("ParseAppliedBy(%.20q) = %v, want invalid", junk, got)
		}
	}
}
