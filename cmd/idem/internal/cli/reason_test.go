package cli

import (
	"context"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/nats-io/nats.go"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemhttp"
	"github.com/idemhq/idem/idemsqlite"
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
		{&idem.BackendError{Backend: "postgres", Op: "relay", Err: &pgconn.PgError{Code: "53100", Message: "could not extend file"}}, "SQLSTATE 53100 (disk full"},
		{fmt.Errorf("write /pw/x: %w", syscall.ENOSPC), "disk full"},
		{&idem.BackendError{Backend: "sqlite", Op: "claim", Err: fmt.Errorf("/pw: %w", idemsqlite.ErrDiskFull)}, "disk full"},
	} {
		if got := ReasonOf(c.err); !strings.Contains(got, c.want) || strings.Contains(got, "pw") || strings.Contains(got, "secret") {
			t.Errorf("ReasonOf(%v) = %q, want %q", c.err, got, c.want)
		}
	}
}
