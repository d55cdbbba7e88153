package cli

import (
	"strings"
	"testing"
)

// TestTraceExportFromEnv: which variables turn the export on, which protocol, and
// the errors for values the exporter would reject or log, none quoting a header.
func TestTraceExportFromEnv(t *testing.T) {
	t.Parallel()
	const secret = "Bearer%20sk_live_123"
	for _, tc := range []struct {
		name     string
		env      map[string]string
		off      bool
		protocol string
		err      string // a part of the error; "" for none
	}{
		{name: "nothing set", env: nil, off: true},
		{name: "protocol alone", env: map[string]string{envProtocol: "grpc"}, off: true},
		{name: "endpoint", env: map[string]string{envEndpoint: "http://collector:4318"}, protocol: "http/protobuf"},
		{name: "traces endpoint", env: map[string]string{envTracesEndpoint: "https://collector/v1/traces"}, protocol: "http/protobuf"},
		{name: "grpc", env: map[string]string{envEndpoint: "http://collector:4317", envProtocol: "grpc"}, protocol: "grpc"},
		{name: "traces protocol wins", env: map[string]string{envEndpoint: "http://c:4317", envProtocol: "http/protobuf", envTracesProtocol: "grpc"}, protocol: "grpc"},
		{name: "exporter otlp, default endpoint", env: map[string]string{envTracesExporter: "otlp"}, protocol: "http/protobuf"},
		{name: "exporter none", env: map[string]string{envEndpoint: "http://c:4318", envTracesExporter: "none"}, off: true},
		{name: "sdk disabled", env: map[string]string{envEndpoint: "http://c:4318", envSDKDisabled: "true"}, off: true},
		{name: "exporter zipkin", env: map[string]string{envEndpoint: "http://c:4318", envTracesExporter: "zipkin"}, err: "OTLP only"},
		{name: "bad protocol", env: map[string]string{envEndpoint: "http://c:4318", envProtocol: "thrift"}, err: "unknown OTLP protocol"},
		{name: "no scheme", env: map[string]string{envEndpoint: "collector:4318"}, err: "not an http:// or https:// URL"},
		{name: "credentials in endpoint", env: map[string]string{envEndpoint: "ftp://u:hunter2@c"}, err: "OTEL_EXPORTER_OTLP_ENDPOINT"},
		{name: "headers without =", env: map[string]string{envEndpoint: "http://c:4318", envHeaders: "authorization " + secret}, err: "pair 1 has no '='"},
		{name: "bad header name", env: map[string]string{envEndpoint: "http://c:4318", envTracesHeaders: "a=b,x y=" + secret}, err: "pair 2: the name"},
		{name: "bad escape", env: map[string]string{envEndpoint: "http://c:4318", envHeaders: "authorization=" + secret + "%zz"}, err: "not URL-encoded"},
		{name: "good headers", env: map[string]string{envEndpoint: "http://c:4318", envHeaders: "authorization=" + secret + ",x-b=c,"}, protocol: "http/protobuf"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, err := TraceExportFromEnv(func(k string) string { return tc.env[k] })
			switch {
			case tc.err != "":
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one with %q", err, tc.err)
				}
				if strings.Contains(err.Error(), "sk_live") || strings.Contains(err.Error(), "hunter2") {
					t.Errorf("the error %q shows a credential", err)
				}
			case err != nil:
				t.Fatalf("error %v, want none", err)
			case tc.off && e != nil:
				t.Errorf("export %+v, want none", e)
			case !tc.off && (e == nil || e.protocol != tc.protocol):
				t.Errorf("export %+v, want one over %s", e, tc.protocol)
			}
		})
	}
}
