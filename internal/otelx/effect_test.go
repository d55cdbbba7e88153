package otelx_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/idemhq/idem/effect"
	"github.com/idemhq/idem/effect/saga"
	"github.com/idemhq/idem/idemhttp"
	"github.com/idemhq/idem/idemkey"
	"github.com/idemhq/idem/internal/otelx"
	"github.com/idemhq/idem/internal/sqltest"
)

// downstream is a payment API that records each request's headers.
type downstream struct {
	srv *httptest.Server
	mu  sync.Mutex
	got []http.Header
}

func newDownstream(t *testing.T) *downstream {
	d := &downstream{}
	d.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d.mu.Lock()
		d.got = append(d.got, r.Header.Clone())
		d.mu.Unlock()
		w.WriteHeader(http.StatusCreated)
	}))
	t.Cleanup(d.srv.Close)
	return d
}

// lineage is the key idemhttp.Transport sends for a POST /charges made under the
// key parent.
func (d *downstream) lineage(parent string) string {
	return idemkey.Derive(parent, "POST "+strings.TrimPrefix(d.srv.URL, "http://")+"/charges")
}

// charge is an effect call through idemhttp.Transport, which takes the fence's
// derived key from ctx.
func (d *downstream) charge(tr tracing) effect.Call {
	client := &http.Client{Transport: &idemhttp.Transport{TracerProvider: tr.tp, Propagator: tr.prop}}
	return func(ctx context.Context, _ string) ([]byte, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, d.srv.URL+"/charges", strings.NewReader("{}"))
		if err != nil {
			return nil, err
		}
		resp, err := client.Do(req)
		if err != nil {
			return nil, err
		}
		defer resp.Body.Close()
		return io.ReadAll(resp.Body)
	}
}

// TestFenceSpans: Do is an idem.effect.do span under the caller's, with the key,
// step, derived key, token and outcome; the call through idemhttp.Transport is its
// child and sends the derived key and the attempt's traceparent downstream; a
// second Do is replayed, a duplicate.
func TestFenceSpans(t *testing.T) {
	t.Parallel()
	tr := newTracing(t)
	d := newDownstream(t)
	f, err := effect.New(context.Background(), sqltest.SQLite(t), effect.Config{TracerProvider: tr.tp})
	if err != nil {
		t.Fatal(err)
	}
	ctx, root := tr.tp.Tracer("t").Start(context.Background(), "caller")
	for range 2 {
		if _, err := f.Do(ctx, "order-1", "charge", d.charge(tr)); err != nil {
			t.Fatal(err)
		}
	}
	root.End()

	caller := tr.one(t, "caller")
	dos := tr.named(otelx.SpanEffectDo)
	if len(dos) != 2 {
		t.Fatalf("%d do spans, want 2; spans: %v", len(dos), tr.names())
	}
	derived := idemkey.Derive("order-1", "charge")
	for i, outcome := range []string{"called", "replayed"} {
		wantChild(t, dos[i], caller)
		wantAttrs(t, dos[i], map[attribute.Key]any{otelx.KeyKey: "order-1", otelx.KeyStep: "charge",
			otelx.KeyDerivedKey: derived, otelx.KeyEffectOutcome: outcome})
	}
	wantAttrs(t, dos[0], map[attribute.Key]any{otelx.KeyToken: 1, otelx.KeyTakeover: false})
	wantAttrs(t, dos[1], map[attribute.Key]any{otelx.KeyDuplicate: true})

	// The Transport derives the request's key from the fence's (its lineage).
	attempt := tr.one(t, otelx.SpanHTTPClient)
	wantChild(t, attempt, dos[0])
	sent := d.lineage(derived)
	wantAttrs(t, attempt, map[attribute.Key]any{otelx.KeyKey: sent})
	if len(d.got) != 1 {
		t.Fatalf("the payment API was called %d times, want 1", len(d.got))
	}
	if got := d.got[0].Get(idemhttp.HeaderKey); got != sent {
		t.Errorf("the payment API got key %q, want %q, derived from the fence's", got, sent)
	}
	want := fmt.Sprintf("00-%s-%s-01", attempt.SpanContext.TraceID(), attempt.SpanContext.SpanID())
	if got := d.got[0].Get("Traceparent"); got != want {
		t.Errorf("the payment API got traceparent %q, want the attempt's %q", got, want)
	}
}

// TestFenceRecoverSpans: an effect whose call failed is taken over by Recover: an
// idem.effect.recover span with an idem.effect.do child (takeover, token 2,
// recovered), and under it the idem.effect.reconcile span that asked first.
func TestFenceRecoverSpans(t *testing.T) {
	t.Parallel()
	tr := newTracing(t)
	reconcile := func(context.Context, string, string) ([]byte, bool, error) { return nil, false, nil }
	f, err := effect.New(context.Background(), sqltest.SQLite(t), effect.Config{TracerProvider: tr.tp, Reconcile: reconcile})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	failing := func(context.Context, string) ([]byte, error) { return nil, errors.New("timeout") }
	if _, err := f.Do(ctx, "order-2", "charge", failing); err == nil {
		t.Fatal("the failing call's Do returned no error")
	}
	failed := tr.one(t, otelx.SpanEffectDo)
	wantAttrs(t, failed, map[attribute.Key]any{otelx.KeyEffectOutcome: "error"})
	if failed.Status.Code.String() != "Error" {
		t.Errorf("the failed Do's span has status %v, want Error", failed.Status)
	}
	tr.exp.Reset()

	ok := func(context.Context, string) ([]byte, error) { return []byte("ch_1"), nil }
	n, err := f.Recover(ctx, "charge", 10, ok)
	if err != nil || n != 1 {
		t.Fatalf("Recover completed %d (err %v), want 1", n, err)
	}
	rec := tr.one(t, otelx.SpanEffectRecover)
	wantAttrs(t, rec, map[attribute.Key]any{otelx.KeyStep: "charge", otelx.KeyRecovered: 1})
	do := tr.one(t, otelx.SpanEffectDo)
	wantChild(t, do, rec)
	wantAttrs(t, do, map[attribute.Key]any{otelx.KeyKey: "order-2", otelx.KeyEffectOutcome: "recovered",
		otelx.KeyTakeover: true, otelx.KeyToken: 2})
	rc := tr.one(t, otelx.SpanEffectReconcile)
	wantChild(t, rc, do)
	wantAttrs(t, rc, map[attribute.Key]any{otelx.KeyHappened: false, otelx.KeyDerivedKey: idemkey.Derive("order-2", "charge")})
}

// TestSagaSpans: a saga whose second step fails permanently: under the caller's
// span, the advance span holds a step span per action and a compensate span for
// the first step's undo, each the parent of the fence's do span; a call through
// idemhttp.Transport in the first action continues the trace.
func TestSagaSpans(t *testing.T) {
	t.Parallel()
	tr := newTracing(t)
	d := newDownstream(t)
	charge := d.charge(tr)
	def := saga.Definition{Name: "checkout", Steps: []saga.Step{{
		Name:       "reserve",
		Action:     func(ctx context.Context, in saga.Input) ([]byte, error) { return charge(ctx, in.Key) },
		Compensate: func(context.Context, saga.Input) error { return nil },
	}, {
		Name: "charge",
		Action: func(context.Context, saga.Input) ([]byte, error) {
			return nil, effect.Permanent(errors.New("declined"))
		},
		NoCompensation: true,
	}}}
	ctx := context.Background()
	o, err := saga.New(ctx, sqltest.SQLite(t), saga.Config{TracerProvider: tr.tp, Lease: time.Minute}, def)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := o.Start(ctx, "checkout", "order-3", nil); err != nil {
		t.Fatal(err)
	}
	cctx, root := tr.tp.Tracer("t").Start(ctx, "caller")
	for {
		n, err := o.RunOnce(cctx)
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
	}
	root.End()

	adv := tr.one(t, otelx.SpanSagaAdvance)
	wantChild(t, adv, tr.one(t, "caller"))
	wantAttrs(t, adv, map[attribute.Key]any{otelx.KeySagaID: "order-3", otelx.KeySaga: "checkout", otelx.KeySagaState: saga.Compensated})
	steps := tr.named(otelx.SpanSagaStep)
	if len(steps) != 2 {
		t.Fatalf("%d step spans, want 2; spans: %v", len(steps), tr.names())
	}
	for i, name := range []string{"reserve", "charge"} {
		wantChild(t, steps[i], adv)
		wantAttrs(t, steps[i], map[attribute.Key]any{otelx.KeySagaID: "order-3", otelx.KeyStep: name, otelx.KeyAttempt: 1})
	}
	undo := tr.one(t, otelx.SpanSagaCompensate)
	wantChild(t, undo, adv)
	wantAttrs(t, undo, map[attribute.Key]any{otelx.KeySagaID: "order-3", otelx.KeyStep: "reserve", otelx.KeyAttempt: 1})

	// Each step's fence span is its child, named by the step's lineage.
	parents := map[string]tracetest.SpanStub{"do:reserve": steps[0], "do:charge": steps[1], "undo:reserve": undo}
	dos := tr.named(otelx.SpanEffectDo)
	if len(dos) != 3 {
		t.Fatalf("%d do spans, want 3", len(dos))
	}
	var reserve tracetest.SpanStub
	for _, do := range dos {
		v, _ := attr(do, otelx.KeyStep)
		p, ok := parents[v.AsString()]
		if !ok {
			t.Fatalf("a do span of step %q", v.AsString())
		}
		wantChild(t, do, p)
		if v.AsString() == "do:reserve" {
			reserve = do
		}
	}
	wantChild(t, tr.one(t, otelx.SpanHTTPClient), reserve)
	if len(d.got) != 1 || d.got[0].Get(idemhttp.HeaderKey) != d.lineage(idemkey.Derive("order-3", "do:reserve")) {
		t.Errorf("the downstream got %v, want one request with the step's derived key", d.got)
	}
}
