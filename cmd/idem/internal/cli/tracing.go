package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"

	"github.com/idemhq/idem/internal/redact"
)

// The daemons (serve, relay, admin) are applications: unlike the library, they set
// up tracing themselves, from the standard OpenTelemetry environment variables.
// The exporters and the SDK read most of them (headers, TLS, timeout, compression,
// sampler, batch limits, resource attributes); these decide whether to export and
// how.
const (
	envEndpoint       = "OTEL_EXPORTER_OTLP_ENDPOINT"
	envTracesEndpoint = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
	envProtocol       = "OTEL_EXPORTER_OTLP_PROTOCOL"
	envTracesProtocol = "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"
	envHeaders        = "OTEL_EXPORTER_OTLP_HEADERS"
	envTracesHeaders  = "OTEL_EXPORTER_OTLP_TRACES_HEADERS"
	envTracesExporter = "OTEL_TRACES_EXPORTER"
	envSDKDisabled    = "OTEL_SDK_DISABLED"
)

// traceFlushTimeout bounds the flush of the spans not yet sent when a daemon stops.
const traceFlushTimeout = 5 * time.Second

// traceExport is the export the environment asks for.
type traceExport struct {
	protocol     string // grpc, http/protobuf or http/json
	endpoint     string // the URL given, to print redacted
	endpointName string // the variable that gave it; "" for the default
}

// Target names the endpoint in the line the daemon prints, its credentials masked (a
// collector's token may be the URL's user name).
func (e *traceExport) Target() string {
	if e.endpoint == "" {
		return "the default endpoint"
	}
	return redact.URL(e.endpoint)
}

// TraceExportFromEnv reads the environment through getenv: nil when it asks for no
// export (no OTLP endpoint, OTEL_TRACES_EXPORTER=none or OTEL_SDK_DISABLED=true).
// A value the exporter would reject, or log, is refused here with an error naming
// the variable; a header's value is never quoted, as it may hold an API key.
func TraceExportFromEnv(getenv func(string) string) (*traceExport, error) {
	if strings.EqualFold(strings.TrimSpace(getenv(envSDKDisabled)), "true") {
		return nil, nil
	}
	explicit := false // OTEL_TRACES_EXPORTER=otlp: export, to the default endpoint if none is set
	switch v := strings.ToLower(strings.TrimSpace(getenv(envTracesExporter))); v {
	case "":
	case "none":
		return nil, nil
	case "otlp":
		explicit = true
	default:
		return nil, fmt.Errorf("$%s = %q: the daemons export traces over OTLP only: set it to otlp or none, or unset it", envTracesExporter, v)
	}
	e := &traceExport{protocol: "http/protobuf"}
	for _, name := range []string{envTracesEndpoint, envEndpoint} {
		if v := strings.TrimSpace(getenv(name)); v != "" {
			e.endpoint, e.endpointName = v, name
			break
		}
	}
	if e.endpoint == "" && !explicit {
		return nil, nil
	}
	for _, name := range []string{envTracesProtocol, envProtocol} {
		if v := strings.TrimSpace(getenv(name)); v != "" {
			switch v {
			case "grpc", "http/protobuf", "http/json":
			default:
				return nil, fmt.Errorf("$%s = %q: unknown OTLP protocol: use grpc, http/protobuf or http/json", name, v)
			}
			e.protocol = v
			break
		}
	}
	if e.endpoint != "" {
		if err := CheckURL("$"+e.endpointName, e.endpoint); err != nil {
			return nil, err
		}
		if err := checkEndpoint(e.endpoint); err != nil {
			return nil, fmt.Errorf("$%s = %s: %v", e.endpointName, redact.URL(e.endpoint), err)
		}
	}
	for _, name := range []string{envHeaders, envTracesHeaders} {
		if err := checkHeaders(getenv(name)); err != nil {
			return nil, fmt.Errorf("$%s: %v (values are not shown: they may hold credentials)", name, err)
		}
	}
	return e, nil
}

// checkEndpoint accepts an http:// or https:// URL with a host, as the OTLP
// specification asks of every protocol (http:// sends without TLS).
func checkEndpoint(raw string) error {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return errors.New("not an http:// or https:// URL: use http://collector:4318 (http/protobuf), or http://collector:4317 with OTEL_EXPORTER_OTLP_PROTOCOL=grpc")
	}
	return nil
}

// checkHeaders accepts what the exporters parse without error: comma-separated
// name=value pairs, names HTTP tokens, values URL-encoded. The exporters log a bad
// pair whole, value included, and skip it; refusing it here keeps a key out of the
// log and the misconfiguration from going unnoticed.
func checkHeaders(v string) error {
	if strings.TrimSpace(v) == "" {
		return nil
	}
	for i, pair := range strings.Split(v, ",") {
		if strings.TrimSpace(pair) == "" {
			continue
		}
		name, value, ok := strings.Cut(pair, "=")
		switch {
		case !ok:
			return fmt.Errorf("pair %d has no '=': use name=value pairs separated by commas", i+1)
		case !httpToken(strings.TrimSpace(name)):
			return fmt.Errorf("pair %d: the name is not an HTTP header name", i+1)
		}
		if _, err := url.PathUnescape(value); err != nil {
			return fmt.Errorf("pair %d: the value is not URL-encoded (write %%25 for %%, %%2C for a comma)", i+1)
		}
	}
	return nil
}

// httpToken reports whether s is a non-empty HTTP token (RFC 9110).
func httpToken(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		if c > 0x7e || c <= ' ' || strings.ContainsRune(`"(),/:;<=>?@[\]{}`, c) {
			return false
		}
	}
	return true
}

// startTracing installs the trace export that the OTEL_* environment asks for as
// the global TracerProvider, with the W3C TraceContext and Baggage propagator, so
// every component the daemon builds (they use the global ones) exports its spans;
// the SDK's own errors go to log. It returns the function that flushes the spans
// not yet sent and stops the export, within traceFlushTimeout. Without an OTLP
// endpoint in the environment it installs nothing, prints nothing, and stop does
// nothing.
func startTracing(ctx context.Context, stderr io.Writer, daemon string, log *slog.Logger) (stop func(), err error) {
	e, err := TraceExportFromEnv(os.Getenv)
	if err != nil || e == nil {
		return func() {}, err
	}
	var exp sdktrace.SpanExporter
	if e.protocol == "grpc" {
		exp, err = otlptracegrpc.New(ctx)
	} else {
		exp, err = otlptracehttp.New(ctx) // reads the protocol, http/protobuf or http/json
	}
	if err != nil {
		return nil, fmt.Errorf("idem %s: OTLP trace exporter: %v", daemon, redact.Error(err))
	}
	// The daemon's name, unless OTEL_SERVICE_NAME or OTEL_RESOURCE_ATTRIBUTES says
	// otherwise (the environment's detector comes last, and wins).
	res, err := resource.New(ctx, resource.WithAttributes(semconv.ServiceName("idem-"+daemon)),
		resource.WithTelemetrySDK(), resource.WithHost(), resource.WithFromEnv())
	if err != nil {
		_ = exp.Shutdown(ctx)
		return nil, fmt.Errorf("idem %s: $OTEL_RESOURCE_ATTRIBUTES or $OTEL_SERVICE_NAME: %v", daemon, err)
	}
	otel.SetLogger(logr.FromSlogHandler(log.Handler()))
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		log.Warn("idem "+daemon+": OpenTelemetry", "err", err)
	}))
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res)) // sampler: $OTEL_TRACES_SAMPLER
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))

	service, _ := res.Set().Value(semconv.ServiceNameKey)
	fmt.Fprintf(stderr, "idem %s: exporting traces over OTLP %s to %s as service %s\n", daemon, e.protocol, e.Target(), service.String())
	return func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), traceFlushTimeout)
		defer cancel()
		if err := tp.Shutdown(sctx); err != nil {
			log.Warn("idem "+daemon+": flushing the last traces failed; spans not yet sent are lost", "err", err)
		}
	}, nil
}
