package main

import (
	"strings"
	"testing"

	"github.com/idemhq/idem/cmd/idem/internal/verify"
	"github.com/idemhq/idem/internal/testsvc"
)

// checkCDCRow checks the log-based relay's row of a `verify --relay cdc` run of ops
// orders with relay kills: no polling relay's row, every order published, the kills
// injected and their copies delivered.
func checkCDCRow(t *testing.T, r *verify.Report, ops int) {
	t.Helper()
	var cdc *verify.Row
	for i, row := range r.Rows {
		if row.Boundary == verify.BoundaryRelay {
			t.Fatalf("the polling relay's row is there: %+v", row)
		}
		if row.Boundary == verify.BoundaryRelayCDC {
			cdc = &r.Rows[i]
		}
	}
	if cdc == nil {
		t.Fatalf("no row %q: %+v", verify.BoundaryRelayCDC, r.Rows)
	}
	if cdc.Lost != 0 || cdc.EffectsApplied < ops || r.Faults["relay_killed_after_publish"] == 0 || cdc.DuplicatesDelivered == 0 {
		t.Fatalf("cdc row %+v, faults %v: want every order published, relay kills injected and their copies delivered", cdc, r.Faults)
	}
}

// With --db, --relay cdc needs PostgreSQL with wal_level=logical and says so.
func TestVerifyRelayCDCBadDB(t *testing.T) {
	t.Parallel()
	_, _, err := run(t, "verify", "--relay", "cdc", "--db", "mysql://root@127.0.0.1:3306/test", "--ops", "1")
	if err == nil || !strings.Contains(err.Error(), "--relay cdc reads PostgreSQL's WAL") {
		t.Fatalf("mysql: %v", err)
	}
	_, stderr, err := run(t, "verify", "--relay", "kafka")
	if err == nil || !strings.Contains(stderr, "--relay must be outbox or cdc") {
		t.Fatalf("--relay kafka: %v %q", err, stderr)
	}
	testsvc.Reach(t, "postgres", "127.0.0.1:5432")
	_, _, err = run(t, "verify", "--relay", "cdc", "--db", testsvc.PostgresURL(), "--ops", "1")
	if err == nil || !strings.Contains(err.Error(), "wal_level") {
		t.Fatalf("a replica-level server: %v", err)
	}
}
