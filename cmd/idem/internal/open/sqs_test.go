package open

import (
	"strings"
	"testing"
)

// TestParseSQSSink: the forms of --sink sqs://, and the mistakes named with their fix.
func TestParseSQSSink(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		raw, endpoint, region, err string
	}{
		{raw: "sqs://?region=eu-west-1", region: "eu-west-1"},
		{raw: "sqs://"},
		{raw: "sqs://localhost:9324", endpoint: "http://localhost:9324", region: "us-east-1"},
		{raw: "sqs://localhost:9324?region=eu-central-1", endpoint: "http://localhost:9324", region: "eu-central-1"},
		{raw: "sqs://AKID:s3cr3t@localhost:9324", err: "credentials do not go in the URL"},
		{raw: "sqs://localhost:9324/orders.fifo", err: "each message's topic names its queue"},
		{raw: "sqs://localhost", err: "is not host:port"},
		{raw: "sqs://?region=eu-west-1&endpoint=x", err: "unknown parameter"},
	} {
		s, err := ParseSink(tc.raw, &SinkFlags{})
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) || strings.Contains(err.Error(), "s3cr3t") {
				t.Errorf("ParseSink(%q) = %v, want an error saying %q (and no secret)", tc.raw, err, tc.err)
			}
			continue
		}
		if err != nil || s.Kind != "sqs" || s.sqs.endpoint != tc.endpoint || s.sqs.region != tc.region {
			t.Errorf("ParseSink(%q) = %+v, %v; want endpoint %q region %q", tc.raw, s.sqs, err, tc.endpoint, tc.region)
		}
	}
}
