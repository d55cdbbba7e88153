package otelx_test

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/effect"
	"github.com/idemhq/idem/idemhttp"
	"github.com/idemhq/idem/idemnats"
	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/idemsqlite"
	"github.com/idemhq/idem/inbox"
	"github.com/idemhq/idem/internal/otelx"
	"github.com/idemhq/idem/internal/testsvc"
	"github.com/idemhq/idem/outbox"
)

// tracing is an SDK with an in-memory exporter, 100% sampling, and W3C propagation.
type tracing struct {
	exp  *tracetest.InMemoryExporter
	tp   *sdktrace.TracerProvider
	prop propagation.TextMapPropagator
}

func newTracing(t *testing.T) tracing {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp), sdktrace.WithSampler(sdktrace.AlwaysSample()))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return tracing{exp: exp, tp: tp, prop: propagation.TraceContext{}}
}

// named returns the ended spans called name.
func (tr tracing) named(name string) []tracetest.SpanStub {
	var out []tracetest.SpanStub
	for _, s := range tr.exp.GetSpans() {
		if s.Name == name {
			out = append(out, s)
		}
	}
	return out
}

// one returns the only ended span called name, failing t unless there is one.
func (tr tracing) one(t *testing.T, name string) tracetest.SpanStub {
	t.Helper()
	got := tr.named(name)
	if len(got) != 1 {
		t.Fatalf("%d spans named %s, want 1; spans: %v", len(got), name, tr.names())
	}
	return got[0]
}

func (tr tracing) names() []string {
	var out []string
	for _, s := range tr.exp.GetSpans() {
		out = append(out, s.Name)
	}
	return out
}

func attr(s tracetest.SpanStub, k attribute.Key) (attribute.Value, bool) {
	for _, a := range s.Attributes {
		if a.Key == k {
			return a.Value, true
		}
	}
	return attribute.Value{}, false
}

// wantAttrs fails t unless s has each attribute with the value given (a string, int,
// or bool), or, for a nil value, has it at all.
func wantAttrs(t *testing.T, s tracetest.SpanStub, want map[attribute.Key]any) {
	t.Helper()
	for k, w := range want {
		v, ok := attr(s, k)
		switch {
		case !ok:
			t.Errorf("span %s has no attribute %s (has %v)", s.Name, k, s.Attributes)
		case w == nil:
		case fmt.Sprint(v.AsInterface()) != fmt.Sprint(w):
			t.Errorf("span %s: %s = %v, want %v", s.Name, k, v.AsInterface(), w)
		}
	}
}

// wantChild fails t unless child's parent is parent, in parent's trace.
func wantChild(t *testing.T, child, parent tracetest.SpanStub) {
	t.Helper()
	if child.Parent.SpanID() != parent.SpanContext.SpanID() || child.SpanContext.TraceID() != parent.SpanContext.TraceID() {
		t.Errorf("span %s's parent is %s/%s, want %s (%s/%s)", child.Name, child.Parent.TraceID(), child.Parent.SpanID(),
			parent.Name, parent.SpanContext.TraceID(), parent.SpanContext.SpanID())
	}
}

// shop is the order flow: an orders API behind the idempotency middleware that
// writes the order and its event in one SQLite transaction; the relay to NATS; an
// inbox consumer that charges a payment API through idemhttp.Transport.
type shop struct {
	tr       tracing
	db       *sql.DB
	txdb     idemsql.TxDB[*sql.Tx]
	store    *idemsqlite.Store
	ob       *outbox.Outbox[*sql.Tx]
	fence    *effect.Fence[*sql.Tx] // on its own database: SQLite has one writer, and the inbox's transaction holds it
	api      *httptest.Server
	payments *httptest.Server
	subject  string
	stream   string

	mu      sync.Mutex
	charged []http.Header // the payment API's request headers, per request
}

func newShop(t *testing.T, tr tracing) *shop {
	ctx := context.Background()
	s := &shop{tr: tr}
	store, err := idemsqlite.Open(ctx, filepath.Join(t.TempDir(), "shop.db"), idemsqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	s.store, s.db = store, store.DB()
	if _, err := s.db.ExecContext(ctx, "CREATE TABLE orders (id TEXT PRIMARY KEY); CREATE TABLE charges (order_id TEXT PRIMARY KEY)"); err != nil {
		t.Fatal(err)
	}
	if s.txdb, err = idemsql.SQLDB(ctx, s.db); err != nil {
		t.Fatal(err)
	}
	if s.ob, err = outbox.New(ctx, s.txdb, outbox.Config{TracerProvider: tr.tp, Propagator: tr.prop}); err != nil {
		t.Fatal(err)
	}
	s.stream, s.subject = testsvc.UniqueName("OTEL_"), testsvc.UniqueName("otel.")
	effects, err := sql.Open("sqlite", idemsqlite.DSN(filepath.Join(t.TempDir(), "effects.db"), idemsqlite.Config{}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { effects.Close() })
	effectsDB, err := idemsql.SQLDB(ctx, effects)
	if err != nil {
		t.Fatal(err)
	}
	if s.fence, err = effect.New(ctx, effectsDB, effect.Config{TracerProvider: tr.tp}); err != nil {
		t.Fatal(err)
	}

	mw, err := idemhttp.Middleware(idemhttp.Config{Store: store, TracerProvider: tr.tp, Propagator: tr.prop})
	if err != nil {
		t.Fatal(err)
	}
	s.api = httptest.NewServer(mw(http.HandlerFunc(s.placeOrder)))
	t.Cleanup(s.api.Close)
	s.payments = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.charged = append(s.charged, r.Header.Clone())
		s.mu.Unlock()
		w.WriteHeader(http.StatusCreated)
	}))
	t.Cleanup(s.payments.Close)
	return s
}

// placeOrder writes the order and its event in one transaction.
func (s *shop) placeOrder(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	id := string(body)
	err := s.txdb.InTx(r.Context(), func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(r.Context(), "INSERT INTO orders (id) VALUES ($1)", id); err != nil {
			return err
		}
		_, err := s.ob.EnqueueTx(r.Context(), tx, idem.Message{ID: "order-" + id, Topic: s.subject, Payload: body})
		return err
	})
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.WriteHeader(http.StatusCreated)
}

// charge is the inbox handler: it records the charge and calls the payment API once,
// through the effect fence, with the fence's derived key.
func (s *shop) charge(ctx context.Context, tx *sql.Tx, m idem.Message) error {
	if _, err := tx.ExecContext(ctx, "INSERT INTO charges (order_id) VALUES ($1)", m.ID); err != nil {
		return err
	}
	_, err := s.fence.Do(ctx, m.ID, "charge", func(ctx context.Context, key string) ([]byte, error) {
		client := &http.Client{Transport: &idemhttp.Transport{TracerProvider: s.tr.tp, Propagator: s.tr.prop}}
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.payments.URL+"/charges", bytes.NewReader(m.Payload))
		if err != nil {
			return nil, err
		}
		req.Header.Set(idemhttp.HeaderKey, key)
		resp, err := client.Do(req)
		if err != nil {
			return nil, err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusCreated {
			return nil, fmt.Errorf("payment API answered %d", resp.StatusCode)
		}
		return nil, nil
	})
	return err
}

// order sends POST /orders with key under ctx through idemhttp.Transport.
func (s *shop) order(t *testing.T, ctx context.Context, key, id string) {
	t.Helper()
	client := &http.Client{Transport: &idemhttp.Transport{TracerProvider: s.tr.tp, Propagator: s.tr.prop}}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.api.URL+"/orders", bytes.NewReader([]byte(id)))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set(idemhttp.HeaderKey, key)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("POST /orders answered %d", resp.StatusCode)
	}
}

// TestOneOrderOneTrace: an order through HTTP middleware → outbox (SQLite) → relay →
// NATS JetStream → inbox → effect fence → payment call is one trace, span by span; a retry of the
// request is replayed in it; a redelivered duplicate adds a suppressed span to it,
// linked to the delivery that applied the order, and no second apply span.
func TestOneOrderOneTrace(t *testing.T) {
	t.Parallel()
	tr := newTracing(t)
	s := newShop(t, tr)
	ctx := context.Background()
	js := testsvc.JetStream(t, "nats://127.0.0.1:4222")
	if _, err := idemnats.EnsureStream(ctx, js, idemnats.StreamConfig{Name: s.stream, Subjects: []string{s.subject}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { js.DeleteStream(context.Background(), s.stream) })

	// The client: a root span, and the request (then its retry) under it.
	cctx, root := tr.tp.Tracer("client").Start(ctx, "checkout")
	s.order(t, cctx, "key-1", "1")
	s.order(t, cctx, "key-1", "1") // the client's retry: replayed
	root.End()

	// The relay.
	sink, err := idemnats.NewSink(js, idemnats.SinkConfig{})
	if err != nil {
		t.Fatal(err)
	}
	relay, err := s.ob.Relay(sink, outbox.RelayConfig{TracerProvider: tr.tp, Propagator: tr.prop})
	if err != nil {
		t.Fatal(err)
	}
	if n, err := relay.RunOnce(ctx); err != nil || n != 1 {
		t.Fatalf("relay published %d messages (err %v), want 1", n, err)
	}

	// The consumer: one delivery from JetStream, then the same delivery again, as a
	// broker redelivers a message whose ack was lost.
	src, err := idemnats.NewSource(ctx, js, idemnats.SourceConfig{Stream: s.stream, Durable: "payments"})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	c, err := inbox.New(ctx, src, s.txdb, s.store, s.charge, inbox.Config{Consumer: "payments", TracerProvider: tr.tp, Propagator: tr.prop})
	if err != nil {
		t.Fatal(err)
	}
	ds := receive(t, src)
	c.Process(ctx, ds)
	again := ds[0]
	again.Attempt, again.Settler = 2, nopSettler{}
	c.Process(ctx, []idem.Delivery{again})

	// The spans of the order, in one trace, parent to child.
	checkout := tr.one(t, "checkout")
	attempts := tr.named(otelx.SpanHTTPClient)
	requests := tr.named(otelx.SpanHTTPServer)
	if len(attempts) != 3 || len(requests) != 2 {
		t.Fatalf("%d client attempts and %d server requests, want 3 (order, retry, payment) and 2; spans: %v", len(attempts), len(requests), tr.names())
	}
	enqueue := tr.one(t, otelx.SpanOutboxEnqueue)
	publish := tr.one(t, otelx.SpanRelayPublish)
	process := tr.one(t, otelx.SpanInboxProcess)
	apply := tr.one(t, otelx.SpanInboxApply)
	dup := tr.one(t, otelx.SpanInboxSuppress)

	wantChild(t, attempts[0], checkout)
	wantChild(t, requests[0], attempts[0])
	wantChild(t, attempts[1], checkout)
	wantChild(t, requests[1], attempts[1])
	wantChild(t, enqueue, requests[0])
	wantChild(t, publish, enqueue)
	wantChild(t, process, publish)
	wantChild(t, apply, process)
	do := tr.one(t, otelx.SpanEffectDo)
	wantChild(t, do, apply)
	payment := attempts[2]
	wantChild(t, payment, do)

	wantKind := map[string]trace.SpanKind{}
	for _, sp := range []tracetest.SpanStub{requests[0], attempts[0], publish, process, apply, payment, dup} {
		wantKind[sp.Name+"/"+sp.SpanKind.String()] = sp.SpanKind
	}
	for _, k := range []string{"idem.http.request/server", "idem.http.attempt/client", "idem.outbox.publish/producer",
		"idem.inbox.process/consumer", "idem.inbox.apply/internal", "idem.inbox.duplicate/consumer"} {
		if _, ok := wantKind[k]; !ok {
			t.Errorf("no span %s; have %v", k, wantKind)
		}
	}

	wantAttrs(t, attempts[0], map[attribute.Key]any{otelx.KeyKey: "key-1", otelx.KeyAttempt: 1})
	wantAttrs(t, requests[0], map[attribute.Key]any{otelx.KeyKey: "key-1", otelx.KeyScope: nil, otelx.KeyOutcome: "acquired", otelx.KeyToken: nil})
	wantAttrs(t, requests[1], map[attribute.Key]any{otelx.KeyKey: "key-1", otelx.KeyOutcome: "replayed", otelx.KeyDuplicate: true})
	wantAttrs(t, enqueue, map[attribute.Key]any{otelx.KeyMessagingDest: s.subject, otelx.KeyMessagingID: "order-1"})
	wantAttrs(t, publish, map[attribute.Key]any{otelx.KeyMessagingSystem: "nats", otelx.KeyMessagingDest: s.subject,
		otelx.KeyMessagingID: "order-1", otelx.KeyOutboxPartition: nil, otelx.KeyMessagingOp: "send"})
	wantAttrs(t, process, map[attribute.Key]any{otelx.KeyMessagingSystem: "nats", otelx.KeyMessagingDest: s.subject,
		otelx.KeyMessagingConsumer: "payments", otelx.KeyScope: "payments", otelx.KeyKey: "order-1",
		otelx.KeyOutcome: "acquired", otelx.KeyVerdict: "processed", otelx.KeyAttempt: 1, otelx.KeyPosition: nil})
	wantAttrs(t, do, map[attribute.Key]any{otelx.KeyKey: "order-1", otelx.KeyStep: "charge", otelx.KeyEffectOutcome: "called"})
	wantAttrs(t, payment, map[attribute.Key]any{otelx.KeyAttempt: 1, otelx.KeyKey: nil})

	// The payment API was called once, with the payment attempt's traceparent.
	if len(s.charged) != 1 {
		t.Fatalf("the payment API was called %d times, want 1", len(s.charged))
	}
	want := fmt.Sprintf("00-%s-%s-01", payment.SpanContext.TraceID(), payment.SpanContext.SpanID())
	if got := s.charged[0].Get("Traceparent"); got != want {
		t.Errorf("the payment API got traceparent %q, want %q", got, want)
	}

	// Every span is in the checkout's trace, the duplicate's too.
	for _, sp := range tr.exp.GetSpans() {
		if sp.SpanContext.TraceID() != checkout.SpanContext.TraceID() {
			t.Errorf("span %s is in trace %s, not the order's %s", sp.Name, sp.SpanContext.TraceID(), checkout.SpanContext.TraceID())
		}
	}
	// The duplicate: a short span under the context the message carried (the publish
	// span), linked to the process span of the delivery that applied the order, with
	// no apply span under it.
	wantAttrs(t, dup, map[attribute.Key]any{otelx.KeyDuplicate: true, otelx.KeyOutcome: "replayed", otelx.KeyKey: "order-1", otelx.KeyAttempt: 2})
	wantChild(t, dup, publish)
	if len(dup.Links) != 1 || dup.Links[0].SpanContext.SpanID() != process.SpanContext.SpanID() ||
		dup.Links[0].SpanContext.TraceID() != process.SpanContext.TraceID() {
		t.Errorf("the duplicate's span links %v, want one link to the process span that applied it, %s", dup.Links, process.SpanContext.SpanID())
	}
	var charges int
	if err := s.db.QueryRow("SELECT COUNT(*) FROM charges").Scan(&charges); err != nil || charges != 1 {
		t.Fatalf("%d charges (err %v), want 1", charges, err)
	}
}

// receive receives the one delivery the test expects, within 30 s.
func receive(t *testing.T, src idem.Source) []idem.Delivery {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ds, err := src.Receive(ctx, 1)
	if err != nil || len(ds) != 1 {
		t.Fatalf("received %d deliveries (err %v), want 1", len(ds), err)
	}
	return ds
}

type nopSettler struct{}

func (nopSettler) Ack(context.Context) error                { return nil }
func (nopSettler) Nak(context.Context, time.Duration) error { return nil }

// dyingSink publishes, then kills its relay before it can mark the rows published
// (as outbox's proof test does): the relay's context ends and the round rolls back.
type dyingSink struct {
	mu   sync.Mutex
	got  []idem.Message
	kill context.CancelFunc
}

func (s *dyingSink) Publish(_ context.Context, msgs ...idem.Message) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.got = append(s.got, msgs...)
	if s.kill != nil {
		s.kill()
		s.kill = nil
		return context.Canceled
	}
	return nil
}

// TestRelayKilledKeepsTrace: a relay killed between publish and mark publishes the
// message again in the same trace, a second publish span under the same enqueue.
func TestRelayKilledKeepsTrace(t *testing.T) {
	t.Parallel()
	tr := newTracing(t)
	s := newShop(t, tr)
	ctx := context.Background()
	cctx, root := tr.tp.Tracer("client").Start(ctx, "checkout")
	s.order(t, cctx, "key-2", "2")
	root.End()

	life, kill := context.WithCancel(ctx)
	defer kill()
	sink := &dyingSink{kill: kill}
	relay, err := s.ob.Relay(sink, outbox.RelayConfig{TracerProvider: tr.tp, Propagator: tr.prop})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := relay.RunOnce(life); !errors.Is(err, context.Canceled) {
		t.Fatalf("the killed relay's round returned %v, want context.Canceled", err)
	}
	if n, err := relay.RunOnce(ctx); err != nil || n != 1 {
		t.Fatalf("the restarted relay published %d messages (err %v), want 1", n, err)
	}

	enqueue := tr.one(t, otelx.SpanOutboxEnqueue)
	publishes := tr.named(otelx.SpanRelayPublish)
	if len(sink.got) != 2 || len(publishes) != 2 {
		t.Fatalf("%d messages sent in %d publish spans, want 2 and 2", len(sink.got), len(publishes))
	}
	for i, p := range publishes {
		wantChild(t, p, enqueue)
		sent := propagation.TraceContext{}.Extract(ctx, propagation.MapCarrier(sink.got[i].Headers))
		sc := trace.SpanContextFromContext(sent)
		if sc.TraceID() != enqueue.SpanContext.TraceID() || sc.SpanID() != p.SpanContext.SpanID() {
			t.Errorf("copy %d was sent with trace context %s/%s, want its publish span's %s/%s", i+1,
				sc.TraceID(), sc.SpanID(), p.SpanContext.TraceID(), p.SpanContext.SpanID())
		}
	}
	if publishes[0].SpanContext.SpanID() == publishes[1].SpanContext.SpanID() {
		t.Error("the two publications share one span")
	}
}
