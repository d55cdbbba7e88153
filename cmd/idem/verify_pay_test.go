package main

import (
	"errors"
	"strings"
	"testing"

	"github.com/idemhq/idem/cmd/idem/internal/cli"
	"github.com/idemhq/idem/cmd/idem/internal/verify"
	"github.com/idemhq/idem/internal/testsvc"
)

// idem verify --pay keyed-write-behind on Postgres: the payment workers charge
// through Fence.DoKeyed with write-behind records (no PENDING, no lease; the
// record written after DoKeyed returns) under the run's faults: workers killed
// after the charge and before any record, responses dropped, workers stalled
// while the other charges the same order, database connections cut. The payment
// service deduplicates by the key, so every order is charged once; its row
// shows the charges it answered from its own record.
func TestVerifyKeyedPayments(t *testing.T) {
	t.Parallel()
	testsvc.Reach(t, "postgres", "127.0.0.1:5432")
	r, err := verifyReport(t, 300, "--fault-rate", "0.3", "--pay", verify.PayKeyedWriteBehind, "--db", testsvc.PostgresURL())
	if r.Pay != verify.PayKeyedWriteBehind {
		t.Fatalf("report pay = %q, want %q", r.Pay, verify.PayKeyedWriteBehind)
	}
	checkHolds(t, r, err, 300)
	row := rows(t, r)[verify.BoundaryPayment]
	if row.DuplicatedEffects != 0 || row.Lost != 0 || row.DuplicatesSuppressed == 0 {
		t.Errorf("payment row %+v: want no order charged twice or missed, and repeated calls answered by the service", row)
	}
	for _, k := range []string{verify.FaultPaymentWorkerKilled, verify.FaultPaymentResponseDropped, verify.FaultDBCut} {
		if r.Faults[k] == 0 {
			t.Errorf("no %s fault: %v", k, r.Faults)
		}
	}
}

// --pay takes fence, keyed or keyed-write-behind, and says so.
func TestVerifyPayFlag(t *testing.T) {
	t.Parallel()
	_, stderr, err := run(t, "verify", "--pay", "cash")
	if !errors.Is(err, cli.ErrUsage) || !strings.Contains(stderr, `--pay must be fence, keyed or keyed-write-behind (got "cash")`) {
		t.Fatalf("--pay cash: %v %q", err, stderr)
	}
}
