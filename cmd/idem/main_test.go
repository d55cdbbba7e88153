package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"strings"
	"testing"

	"github.com/idemhq/idem/chaos"
	"github.com/idemhq/idem/internal/testsvc"
)

func run(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	var out, errb bytes.Buffer
	err = NewMain(&out, &errb).Run(context.Background(), args)
	return out.String(), errb.String(), err
}

func TestHelpListsCommands(t *testing.T) {
	t.Parallel()
	_, stderr, err := run(t, "--help")
	if !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("--help returned %v", err)
	}
	for _, c := range []string{"verify", "bench", "serve", "relay"} {
		if !strings.Contains(stderr, "\n  "+c+" ") {
			t.Errorf("--help does not list %q:\n%s", c, stderr)
		}
	}
}

func TestUnknownCommandAndBadFlags(t *testing.T) {
	t.Parallel()
	if _, stderr, err := run(t, "frobnicate"); !errors.Is(err, errUsage) || !strings.Contains(stderr, `unknown command "frobnicate"`) {
		t.Fatalf("unknown command: err %v, stderr %q", err, stderr)
	}
	if _, stderr, err := run(t, "verify", "--fault-rate", "2"); !errors.Is(err, errUsage) || !strings.Contains(stderr, "--fault-rate") {
		t.Fatalf("bad --fault-rate: err %v, stderr %q", err, stderr)
	}
	if _, _, err := run(t, "verify", "--db", "mysql://x"); err == nil || !strings.Contains(err.Error(), "--db") {
		t.Fatalf("unknown --db: err %v, want one naming --db", err)
	}
	if _, stderr, err := run(t, "serve"); !errors.Is(err, errUsage) || !strings.Contains(stderr, "--upstream is required") {
		t.Fatalf("serve without --upstream: err %v, stderr %q", err, stderr)
	}
}

func verifyReport(t *testing.T, args ...string) (*chaos.Report, error) {
	t.Helper()
	stdout, stderr, err := run(t, append([]string{"verify", "--json", "--ops", "300", "--seed", "7"}, args...)...)
	var r chaos.Report
	if jerr := json.Unmarshal([]byte(stdout), &r); jerr != nil {
		t.Fatalf("verify %v: %v; stdout %q stderr %q", args, err, stdout, stderr)
	}
	return &r, err
}

func TestVerifyHoldsOnSQLite(t *testing.T) {
	t.Parallel()
	r, err := verifyReport(t, "--fault-rate", "0.3")
	if err != nil {
		t.Fatalf("verify failed: %v\n%+v", err, r)
	}
	row := r.Rows[0]
	if row.EffectsApplied != 300 || row.Lost != 0 || row.DuplicatedEffects != 0 || !row.BalanceOK {
		t.Fatalf("row = %+v, want 300 effects, none lost or doubled, balance exact", row)
	}
	if row.DuplicatesDelivered == 0 || row.DuplicatesSuppressed == 0 || r.FaultTotal() == 0 {
		t.Fatalf("row = %+v, faults %v: the run did not exercise duplicates", row, r.Faults)
	}
}

// The negative control: without idem the same flow must double effects and fail.
func TestVerifyUnsafeFails(t *testing.T) {
	t.Parallel()
	r, err := verifyReport(t, "--fault-rate", "0.3", "--unsafe")
	var fail *exitError
	if !errors.As(err, &fail) {
		t.Fatalf("--unsafe returned %v, want a failing verdict", err)
	}
	if r.Rows[0].DuplicatedEffects == 0 || r.OK() {
		t.Fatalf("--unsafe row = %+v, want duplicated effects", r.Rows[0])
	}
}

func TestVerifyHoldsOnPostgres(t *testing.T) {
	t.Parallel()
	cs, _ := testsvc.PostgresSchema(t)
	r, err := verifyReport(t, "--fault-rate", "0.3", "--db", cs)
	if err != nil {
		t.Fatalf("verify on postgres failed: %v\n%+v", err, r)
	}
	if row := r.Rows[0]; row.EffectsApplied != 300 || !row.OK() {
		t.Fatalf("row = %+v", row)
	}
}
