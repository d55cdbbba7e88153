package main

import (
	"compress/gzip"
	"context"
	"encoding/hex"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/idemhq/idem/idemhttp"
	"github.com/idemhq/idem/internal/otelx"
)

// otlpReceiver is an OTLP/HTTP trace receiver: it decodes each export request as a
// collector does and keeps its spans, with their service and the request's headers.
type otlpReceiver struct {
	*httptest.Server
	mu      sync.Mutex
	spans   []receivedSpan
	headers []http.Header
}

type receivedSpan struct {
	service string
	span    *tracepb.Span
}

func newOTLPReceiver(t *testing.T) *otlpReceiver {
	t.Helper()
	r := &otlpReceiver{}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Method != http.MethodPost || req.URL.Path != "/v1/traces" || req.Header.Get("Content-Type") != "application/x-protobuf" {
			t.Errorf("OTLP receiver: %s %s (%s), want POST /v1/traces of application/x-protobuf", req.Method, req.URL.Path, req.Header.Get("Content-Type"))
			http.Error(w, "unexpected request", http.StatusBadRequest)
			return
		}
		var body io.Reader = req.Body
		if req.Header.Get("Content-Encoding") == "gzip" {
			gz, err := gzip.NewReader(req.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			body = gz
		}
		raw, err := io.ReadAll(body)
		var export coltracepb.ExportTraceServiceRequest
		if err == nil {
			err = proto.Unmarshal(raw, &export)
		}
		if err != nil {
			t.Errorf("OTLP receiver: undecodable export request: %v", err)
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		r.mu.Lock()
		r.headers = append(r.headers, req.Header.Clone())
		for _, rs := range export.GetResourceSpans() {
			service := ""
			for _, a := range rs.GetResource().GetAttributes() {
				if a.GetKey() == "service.name" {
					service = a.GetValue().GetStringValue()
				}
			}
			for _, ss := range rs.GetScopeSpans() {
				for _, s := range ss.GetSpans() {
					r.spans = append(r.spans, receivedSpan{service: service, span: s})
				}
			}
		}
		r.mu.Unlock()
		out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(out)
	}))
	t.Cleanup(r.Close)
	return r
}

// named returns the spans received called name.
func (r *otlpReceiver) named(name string) []receivedSpan {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []receivedSpan
	for _, s := range r.spans {
		if s.span.GetName() == name {
			out = append(out, s)
		}
	}
	return out
}

// stringAttr returns s's string attribute key, "" if it has none.
func stringAttr(s *tracepb.Span, key string) string {
	for _, a := range s.GetAttributes() {
		if a.GetKey() == key {
			return a.GetValue().GetStringValue()
		}
	}
	return ""
}

// postTraced posts body with key and a W3C traceparent to url and returns the status.
func postTraced(t *testing.T, url, key, traceparent string) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(`{"amount":5}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set(idemhttp.HeaderKey, key)
	req.Header.Set("Traceparent", traceparent)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestServeExportsTraces: with OTEL_EXPORTER_OTLP_ENDPOINT set, idem serve exports
// the gateway's idem.http.request spans over OTLP/HTTP, continuing the caller's
// traceparent, as the service OTEL_SERVICE_NAME names, sending the headers of
// OTEL_EXPORTER_OTLP_HEADERS (never printed), and flushes them when it stops; its
// log lines under a request carry the request's trace and span ids.
//
// Not parallel: it sets the environment, and the daemon installs the global
// TracerProvider, as an application does.
func TestServeExportsTraces(t *testing.T) {
	rcv := newOTLPReceiver(t)
	const secret = "s3cret-collector-key"
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", rcv.URL)
	t.Setenv("OTEL_EXPORTER_OTLP_HEADERS", "x-api-key="+secret+",x-tenant=shop")
	t.Setenv("OTEL_SERVICE_NAME", "gateway-under-test")
	t.Setenv("OTEL_TRACES_SAMPLER", "parentbased_always_on")

	// The upstream answers /orders, and hangs up on /slow without an answer.
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		conn, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			conn.Close()
		}
	}, nil)
	g := startGateway(t, up.URL, "--store", "memory:")

	const (
		traceOK  = "4bf92f3577b34da6a3ce929d0e0e4736"
		traceBad = "0af7651916cd43dd8448eb211c80319c"
		parent   = "00f067aa0ba902b7"
	)
	if got := postTraced(t, "http://"+g.addr+"/orders", "traced-1", "00-"+traceOK+"-"+parent+"-01"); got != http.StatusCreated {
		t.Fatalf("POST /orders answered %d, want 201", got)
	}
	if got := postTraced(t, "http://"+g.addr+"/slow", "traced-2", "00-"+traceBad+"-"+parent+"-01"); got != http.StatusBadGateway {
		t.Fatalf("POST /slow answered %d, want 502", got)
	}
	g.stop(t) // the spans are flushed as the gateway stops
	stderr := g.stderr.String()

	spans := rcv.named(otelx.SpanHTTPServer)
	if len(spans) != 2 {
		t.Fatalf("the receiver got %d %s spans, want 2\n%s", len(spans), otelx.SpanHTTPServer, stderr)
	}
	byTrace := map[string]receivedSpan{}
	for _, s := range spans {
		byTrace[hex.EncodeToString(s.span.GetTraceId())] = s
	}
	ok, bad := byTrace[traceOK], byTrace[traceBad]
	if ok.span == nil || bad.span == nil {
		t.Fatalf("the spans are in traces %v, want %s and %s (the callers')", keys(byTrace), traceOK, traceBad)
	}
	if got := hex.EncodeToString(ok.span.GetParentSpanId()); got != parent {
		t.Errorf("the request span's parent is %s, want the caller's %s", got, parent)
	}
	if ok.service != "gateway-under-test" {
		t.Errorf("the spans' service.name is %q, want $OTEL_SERVICE_NAME's", ok.service)
	}
	if ok.span.GetKind() != tracepb.Span_SPAN_KIND_SERVER {
		t.Errorf("the request span is of kind %v, want server", ok.span.GetKind())
	}
	if k, o := stringAttr(ok.span, string(otelx.KeyKey)), stringAttr(ok.span, string(otelx.KeyOutcome)); k != "traced-1" || o != "acquired" {
		t.Errorf("the request span has idem.key %q and idem.outcome %q, want traced-1 and acquired", k, o)
	}
	rcv.mu.Lock()
	for _, h := range rcv.headers {
		if h.Get("X-Api-Key") != secret || h.Get("X-Tenant") != "shop" {
			t.Errorf("an export request carried X-Api-Key %q, X-Tenant %q; want $%s's", h.Get("X-Api-Key"), h.Get("X-Tenant"), "OTEL_EXPORTER_OTLP_HEADERS")
		}
	}
	rcv.mu.Unlock()

	if !strings.Contains(stderr, "exporting traces over OTLP http/protobuf to "+rcv.URL+" as service gateway-under-test") {
		t.Errorf("the gateway did not say where it exports:\n%s", stderr)
	}
	if strings.Contains(stderr, secret) {
		t.Errorf("the gateway printed a header value of $%s:\n%s", "OTEL_EXPORTER_OTLP_HEADERS", stderr)
	}
	// The upstream's failure is logged under the request's span.
	line := regexp.MustCompile(`(?m)^.*idem serve: the upstream did not answer.*$`).FindString(stderr)
	wantIDs := "trace_id=" + traceBad + " span_id=" + hex.EncodeToString(bad.span.GetSpanId())
	if !strings.Contains(line, wantIDs) {
		t.Errorf("the upstream's failure was logged as %q, want it with %s\n%s", line, wantIDs, stderr)
	}
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// grpcReceiver is an OTLP/gRPC trace receiver keeping the spans it is sent.
type grpcReceiver struct {
	coltracepb.UnimplementedTraceServiceServer
	mu    sync.Mutex
	spans []receivedSpan
}

func (g *grpcReceiver) Export(_ context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		service := ""
		for _, a := range rs.GetResource().GetAttributes() {
			if a.GetKey() == "service.name" {
				service = a.GetValue().GetStringValue()
			}
		}
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				g.spans = append(g.spans, receivedSpan{service: service, span: s})
			}
		}
	}
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

// TestRelayExportsTracesOverGRPC: with OTEL_EXPORTER_OTLP_PROTOCOL=grpc, idem relay
// exports its idem.outbox.publish spans to a gRPC receiver, as idem-relay, each a
// child of the trace context stored with its row, and the webhook it publishes to
// gets the publish span's traceparent.
func TestRelayExportsTracesOverGRPC(t *testing.T) {
	rcv := &grpcReceiver{}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	coltracepb.RegisterTraceServiceServer(gs, rcv)
	go gs.Serve(ln)
	t.Cleanup(gs.Stop)
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://"+ln.Addr().String())
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")

	var mu sync.Mutex
	var sent []string // the webhook requests' traceparents
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		sent = append(sent, r.Header.Get("Traceparent"))
		mu.Unlock()
	}))
	t.Cleanup(hook.Close)

	// A row written as a service in another language would, with its traceparent.
	const trace, parent = "5b8efff798038103d269b633813fc60c", "eee19b7ec3c1b174"
	path, db, _ := sqliteOutbox(t, "orders.created")
	now := time.Now().UnixMilli()
	if _, err := db.Exec(`INSERT INTO idem_outbox (msg_id, topic, ordering_key, part, headers, payload, created_at, available_at)
		VALUES ($1, $2, '', 0, $3, $4, $5, $5)`, "traced-row", "orders.created",
		`{"traceparent":"00-`+trace+`-`+parent+`-01"}`, []byte("{}"), now); err != nil {
		t.Fatal(err)
	}
	r := startRelay(t, "--db", "sqlite:"+path, "--sink", hook.URL+"/hooks", "--webhook-secret", strings.Repeat("s", 32), "--poll", "50ms")
	waitFor(t, "the webhook's request", func() bool { mu.Lock(); defer mu.Unlock(); return len(sent) == 1 })
	r.stop(t) // flushes the spans

	if !strings.Contains(r.stderr.String(), "exporting traces over OTLP grpc to http://"+ln.Addr().String()+" as service idem-relay") {
		t.Errorf("the relay did not say where it exports:\n%s", r.stderr)
	}
	rcv.mu.Lock()
	defer rcv.mu.Unlock()
	var publish *receivedSpan
	for i, s := range rcv.spans {
		if s.span.GetName() == otelx.SpanRelayPublish {
			publish = &rcv.spans[i]
		}
	}
	if publish == nil {
		t.Fatalf("the gRPC receiver got no %s span among %d\n%s", otelx.SpanRelayPublish, len(rcv.spans), r.stderr)
	}
	if got := hex.EncodeToString(publish.span.GetTraceId()); got != trace {
		t.Errorf("the publish span is in trace %s, want the row's %s", got, trace)
	}
	if got := hex.EncodeToString(publish.span.GetParentSpanId()); got != parent {
		t.Errorf("the publish span's parent is %s, want the row's %s", got, parent)
	}
	if publish.service != "idem-relay" || publish.span.GetKind() != tracepb.Span_SPAN_KIND_PRODUCER {
		t.Errorf("the publish span is of service %q, kind %v; want idem-relay, producer", publish.service, publish.span.GetKind())
	}
	want := "00-" + trace + "-" + hex.EncodeToString(publish.span.GetSpanId()) + "-01"
	if sent[0] != want {
		t.Errorf("the webhook got traceparent %q, want the publish span's %q", sent[0], want)
	}
}

// waitFor polls cond until it holds, failing t after 30 seconds.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("still waiting for %s after 30s", what)
		}
	}
}
