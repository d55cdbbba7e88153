package inbox_test

import (
	"context"
	"database/sql"
	"maps"
	"testing"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemmysql"
	"github.com/idemhq/idem/idempg"
	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/inbox"
	"github.com/idemhq/idem/internal/otelx"
	"github.com/idemhq/idem/internal/testsvc"
)

// tracer is one process's tracing: its provider and what it exported.
type tracer struct {
	tp  *sdktrace.TracerProvider
	exp *tracetest.InMemoryExporter
}

func newTracer(t *testing.T) tracer {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp), sdktrace.WithSampler(sdktrace.AlwaysSample()))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return tracer{tp, exp}
}

// byKey returns the spans named name, by their idem.key attribute.
func (tr tracer) byKey(name string) map[string]tracetest.SpanStub {
	out := map[string]tracetest.SpanStub{}
	for _, s := range tr.exp.GetSpans() {
		if s.Name != name {
			continue
		}
		for _, a := range s.Attributes {
			if a.Key == otelx.KeyKey {
				out[a.Value.AsString()] = s
			}
		}
	}
	return out
}

// tracedOrders returns n orders starting at from, each sent under a producer span
// of its own (its context in the headers), and those contexts by message id.
func tracedOrders(tp trace.TracerProvider, from, n int) ([]idem.Message, map[string]trace.SpanContext) {
	var msgs []idem.Message
	for i := from; i < from+n; i++ {
		m := order(i)
		m.Headers = map[string]string{}
		msgs = append(msgs, m)
	}
	return msgs, sendTraced(tp, msgs)
}

// sendTraced sends each of msgs under a producer span of its own, its context
// injected into the message's headers, and returns those contexts by message id.
func sendTraced(tp trace.TracerProvider, msgs []idem.Message) map[string]trace.SpanContext {
	prop := propagation.TraceContext{}
	sent := map[string]trace.SpanContext{}
	for _, m := range msgs {
		ctx, span := tp.Tracer("shop").Start(context.Background(), "send order")
		prop.Inject(ctx, propagation.MapCarrier(m.Headers))
		span.End()
		sent[m.ID] = span.SpanContext()
	}
	return sent
}

// deliver publishes msgs on a fresh fake broker and hands them to process in
// batches of at most batch.
func deliver(t *testing.T, process func(context.Context, []idem.Delivery), batch int, msgs []idem.Message) {
	t.Helper()
	ctx := context.Background()
	fb := newFakeBroker()
	fb.Publish(ctx, msgs...)
	for left := len(msgs); left > 0; {
		ds, err := fb.Receive(ctx, min(batch, left))
		if err != nil {
			t.Fatal(err)
		}
		process(ctx, ds)
		left -= len(ds)
	}
}

// testDuplicateLinks runs the duplicate-link proof on one store: orders applied by
// a traced consumer, in a batch (the store's one-statement record path) and alone;
// orders applied by a consumer with tracing off; then all of them redelivered to
// another consumer, as after a restart, in one batch and one by one. Each duplicate
// is an idem.inbox.duplicate span under the context its message carries, linked to
// the process span of the delivery that applied it (none for those applied
// untraced), and no apply span runs.
func testDuplicateLinks(t *testing.T, consumer func(tr *tracer) func(context.Context, []idem.Delivery)) {
	producer, firstTracer, secondTracer := newTracer(t), newTracer(t), newTracer(t)
	first, off, second := consumer(&firstTracer), consumer(nil), consumer(&secondTracer)
	traced, sent := tracedOrders(producer.tp, 0, 6)
	untraced, sentUntraced := tracedOrders(producer.tp, 100, 2)
	maps.Copy(sent, sentUntraced)

	deliver(t, first, 5, traced) // a batch of five, then one alone
	deliver(t, off, 2, untraced)
	all := append(append([]idem.Message{}, traced...), untraced...)
	deliver(t, second, 8, all) // every one again, in one batch
	deliver(t, second, 1, all) // and again, one by one

	applied := firstTracer.byKey(otelx.SpanInboxProcess)
	if len(applied) != len(traced) {
		t.Fatalf("%d process spans in the first consumer, want %d", len(applied), len(traced))
	}
	var dups []tracetest.SpanStub
	for _, s := range secondTracer.exp.GetSpans() {
		switch s.Name {
		case otelx.SpanInboxSuppress:
			dups = append(dups, s)
		case otelx.SpanInboxApply, otelx.SpanInboxProcess:
			t.Errorf("the second consumer has a %s span: it applied a duplicate", s.Name)
		}
	}
	if len(dups) != 2*len(all) {
		t.Fatalf("%d duplicate spans, want %d", len(dups), 2*len(all))
	}
	for _, d := range dups {
		var key string
		for _, a := range d.Attributes {
			if a.Key == otelx.KeyKey {
				key = a.Value.AsString()
			}
		}
		if p := sent[key]; d.Parent.SpanID() != p.SpanID() || d.SpanContext.TraceID() != p.TraceID() {
			t.Errorf("duplicate of %s: parent %s in trace %s, want the producer's span %s in %s",
				key, d.Parent.SpanID(), d.SpanContext.TraceID(), p.SpanID(), p.TraceID())
		}
		a, ok := applied[key]
		switch {
		case !ok && len(d.Links) != 0:
			t.Errorf("duplicate of %s, applied untraced, links %v; want none", key, d.Links)
		case ok && (len(d.Links) != 1 || d.Links[0].SpanContext.SpanID() != a.SpanContext.SpanID() ||
			d.Links[0].SpanContext.TraceID() != a.SpanContext.TraceID()):
			t.Errorf("duplicate of %s links %v, want one link to the span that applied it, %s", key, d.Links, a.SpanContext.SpanID())
		}
	}
}

func TestDuplicateLinksToApplierPostgres(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testsvc.PostgresPool(t)
	store, err := idempg.New(ctx, pool, idempg.Config{})
	if err != nil {
		t.Fatal(err)
	}
	handle := func(context.Context, pgx.Tx, idem.Message) error { return nil }
	consumer := func(tr *tracer) func(context.Context, []idem.Delivery) {
		cfg := inbox.Config{Consumer: "links", Backoff: noBackoff, Propagator: propagation.TraceContext{}}
		if tr != nil {
			cfg.TracerProvider = tr.tp
		}
		c, err := inbox.New(ctx, newFakeBroker(), idempg.TxDB(pool), store, handle, cfg)
		if err != nil {
			t.Fatal(err)
		}
		return c.Process
	}
	testDuplicateLinks(t, consumer)
}

func TestDuplicateLinksToApplierMySQL(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testsvc.MySQLDB(t)
	store, err := idemmysql.New(ctx, db, idemmysql.Config{})
	if err != nil {
		t.Fatal(err)
	}
	txdb, err := idemsql.SQLDB(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	handle := func(context.Context, *sql.Tx, idem.Message) error { return nil }
	consumer := func(tr *tracer) func(context.Context, []idem.Delivery) {
		cfg := inbox.Config{Consumer: "links", Backoff: noBackoff, Propagator: propagation.TraceContext{}}
		if tr != nil {
			cfg.TracerProvider = tr.tp
		}
		c, err := inbox.New(ctx, newFakeBroker(), txdb, store, handle, cfg)
		if err != nil {
			t.Fatal(err)
		}
		return c.Process
	}
	testDuplicateLinks(t, consumer)
}
