package main

import (
	"errors"
	"net/url"
	"strings"
	"testing"

	"github.com/idemhq/idem/cmd/idem/internal/cli"
	"github.com/idemhq/idem/cmd/idem/internal/verify"
	"github.com/idemhq/idem/internal/testsvc"
)

// checkGRPC asserts what a run with --api grpc adds to checkHolds: the row is
// "client → gRPC API" (no HTTP row), and every injected dropped response,
// duplicate call and call held past its deadline brought the server another
// attempt of its order: grpc-go's retry policy (or the client) resent what was
// dropped, and the duplicates reached the service, which ran each order once.
func checkGRPC(t *testing.T, r *verify.Report, err error, ops int) {
	t.Helper()
	if r.API != verify.APIGRPC {
		t.Fatalf("report api = %q, want %q", r.API, verify.APIGRPC)
	}
	checkHolds(t, r, err, ops)
	m := rows(t, r)
	if _, ok := m[verify.BoundaryHTTP]; ok {
		t.Fatalf("a run over gRPC has the row %q: %+v", verify.BoundaryHTTP, r.Rows)
	}
	row := m[verify.BoundaryGRPC]
	// Every dropped response brings the server a retry of its call (grpc-go's, or
	// the client's own when a replay's headers had committed the call). The
	// duplicate and late copies add more, but not one each for certain: a copy
	// cut short by a call that gave up (a loaded machine) never arrives, so they
	// are only required to happen.
	drops := r.Faults[verify.FaultGRPCDropResponse]
	if row.DuplicatesDelivered < drops || row.Attempts != ops+row.DuplicatesDelivered {
		t.Errorf("gRPC row %+v: want at least %d copies delivered, one per dropped response, and attempts = orders + copies (%v)", row, drops, r.Faults)
	}
	for _, k := range []string{verify.FaultGRPCDropResponse, verify.FaultGRPCDuplicateCall, verify.FaultGRPCPastDeadline} {
		if r.Faults[k] == 0 {
			t.Errorf("no %s fault: %v", k, r.Faults)
		}
	}
}

// idem verify --api grpc on the default setup (SQLite, embedded NATS, clock
// jumps, late retries): the orders over gRPC through idemgrpc, every boundary
// holds.
func TestVerifyGRPCHoldsOnSQLite(t *testing.T) {
	t.Parallel()
	// 800 orders: a gRPC run draws one client fault per call (grpc-go's retries are
	// below the fault interceptor), where HTTP draws one per attempt, and the draws
	// follow the keys, which carry the hour: 400 calls left a run with no clock
	// jump about one hour in twenty.
	r, err := verifyReport(t, 800, "--fault-rate", "0.3", "--api", "grpc")
	checkGRPC(t, r, err, 800)
	if r.Faults[verify.FaultClockJump] == 0 || r.Faults[verify.FaultLateRetry] == 0 {
		t.Errorf("SQLite run over gRPC without clock jumps or late retries: %v", r.Faults)
	}
}

func TestVerifyGRPCHoldsOnPostgres(t *testing.T) {
	t.Parallel()
	testsvc.Reach(t, "postgres", "127.0.0.1:5432")
	r, err := verifyReport(t, 300, "--fault-rate", "0.3", "--api", "grpc", "--db", testsvc.PostgresURL())
	checkGRPC(t, r, err, 300)
	if r.Faults[verify.FaultDBCut] == 0 {
		t.Errorf("postgres run over gRPC without database cuts: %v", r.Faults)
	}
}

func TestVerifyGRPCHoldsOnMySQL(t *testing.T) {
	t.Parallel()
	base := testsvc.MySQLURL()
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	testsvc.Reach(t, "mysql", u.Host)
	r, err := verifyReport(t, 300, "--fault-rate", "0.3", "--api", "grpc", "--db", base)
	checkGRPC(t, r, err, 300)
}

// The negative control over gRPC: without idemgrpc's interceptor the same calls,
// retried by grpc-go and duplicated, double orders, and the run fails.
func TestVerifyGRPCUnsafeFails(t *testing.T) {
	t.Parallel()
	r, err := verifyReport(t, 300, "--fault-rate", "0.3", "--api", "grpc", "--unsafe")
	var fail *cli.ExitError
	if !errors.As(err, &fail) {
		t.Fatalf("--api grpc --unsafe returned %v, want a failing verdict", err)
	}
	m := rows(t, r)
	row := m[verify.BoundaryGRPC]
	if r.OK() || row.DuplicatedEffects == 0 || row.DuplicatesSuppressed != 0 || row.Refused != 0 {
		t.Fatalf("--api grpc --unsafe gRPC row = %+v, want doubled orders, none suppressed or refused", row)
	}
	// The retry after the retention window is applied again without idem.
	if r.Faults[verify.FaultLateRetry] == 0 || row.LateDuplicates == 0 {
		t.Fatalf("--api grpc --unsafe gRPC row = %+v (faults %v), want late retries applied", row, r.Faults)
	}
}

// --api takes http or grpc, and says so.
func TestVerifyAPIFlag(t *testing.T) {
	t.Parallel()
	_, stderr, err := run(t, "verify", "--api", "soap")
	if !errors.Is(err, cli.ErrUsage) || !strings.Contains(stderr, `--api must be http or grpc (got "soap")`) {
		t.Fatalf("--api soap: %v %q", err, stderr)
	}
}
