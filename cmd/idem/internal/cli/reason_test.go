package cli

import (
	"context"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemhttp"
)

// Each failure has a short reason of idem's own.
func TestReasonOf(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		err  error
		want string
	}{
		{&idemhttp.StatusError{StatusCode: 502, Body: "secret"}, "webhook returned 502"},
		{fmt.Errorf("x: %w", os.NewSyscallError("connect", syscall.ECONNREFUSED)), "connection refused"},
		{fmt.Errorf("x: %w", nats.ErrNoResponders), "no responders"},
		{fmt.Errorf("x: %w", context.DeadlineExceeded), "timed out"},
		{fmt.Errorf("x: %w", kerr.UnknownTopicOrPartition), "kafka error UNKNOWN_TOPIC_OR_PARTITION"},
		{&idem.BackendError{Backend: "redis", Op: "publish", Err: fmt.Errorf("ERR redis://:pw@h")}, "redis publish failed"},
		{fmt.Errorf("a body quoting postgres://u:pw@h"), "failed (details in the log)"},
	} {
		if got := ReasonOf(c.err); !strings.Contains(got, c.want) || strings.Contains(got, "pw") || strings.Contains(got, "secret") {
			t.Errorf("ReasonOf(%v) = %q, want %q", c.err, got, c.want)
		}
	}
}
