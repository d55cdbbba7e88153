package idemhttp_test

import (
	"context"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"

	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/idemhq/idem/idemhttp"
	"github.com/idemhq/idem/idemmem"
)

// Tracing: give the middleware the application's TracerProvider and propagator (or
// leave them nil for the global ones). Each keyed request is a span, a child of the
// caller's traceparent, with the key's outcome; a retry is replayed in its own span.
func ExampleConfig_tracing() {
	exp := tracetest.NewInMemoryExporter() // in an application: an OTLP exporter
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	defer tp.Shutdown(context.Background())

	store, err := idemmem.New(idemmem.Config{})
	if err != nil {
		log.Fatal(err)
	}
	mw, err := idemhttp.Middleware(idemhttp.Config{Store: store, TracerProvider: tp, Propagator: propagation.TraceContext{}})
	if err != nil {
		log.Fatal(err)
	}
	srv := httptest.NewServer(mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
	})))
	defer srv.Close()

	for range 2 {
		req, _ := http.NewRequest("POST", srv.URL+"/orders", strings.NewReader(`{"sku":"tea"}`))
		req.Header.Set("Idempotency-Key", "order-7")
		req.Header.Set("traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			log.Fatal(err)
		}
		resp.Body.Close()
	}
	for _, s := range exp.GetSpans() {
		attrs := map[string]string{}
		for _, a := range s.Attributes {
			attrs[string(a.Key)] = a.Value.String()
		}
		fmt.Printf("%s %s trace=%s parent=%s key=%s outcome=%s\n", s.Name, s.SpanKind, s.SpanContext.TraceID(), s.Parent.SpanID(),
			attrs["idem.key"], attrs["idem.outcome"])
	}
	// Output:
	// idem.http.request server trace=0af7651916cd43dd8448eb211c80319c parent=b7ad6b7169203331 key=order-7 outcome=acquired
	// idem.http.request server trace=0af7651916cd43dd8448eb211c80319c parent=b7ad6b7169203331 key=order-7 outcome=replayed
}
