package main

import (
	"errors"
	"strings"
	"testing"

	"github.com/idemhq/idem/chaos"
	"github.com/idemhq/idem/cmd/idem/internal/cli"
	"github.com/idemhq/idem/cmd/idem/internal/verify"
	"github.com/idemhq/idem/internal/testsvc"
)

// --broker db:: the database as the queue (package queue). The order service
// enqueues in the order's transaction, no relay runs, and inbox consumers on a
// queue Source retire each message in its effect's transaction, while they are
// killed before the effect, before and after the commit, paused with their
// lease renewals until another consumer took their message over, and (Postgres,
// MySQL) their connections cut.

// dbQueueOps: enough claims for every kind of kill and a pause or more.
const dbQueueOps = 600

// dbQueueRows indexes the rows of a --broker db: report, and checks it has the
// queue's rows and neither the outbox's, the relay's nor the broker's.
func dbQueueRows(t *testing.T, r *verify.Report) map[string]verify.Row {
	t.Helper()
	m := map[string]verify.Row{}
	for _, row := range r.Rows {
		m[row.Boundary] = row
	}
	for _, b := range []string{verify.BoundaryHTTP, verify.BoundaryQueue, verify.BoundaryQueueConsumer, verify.BoundaryPayment, verify.BoundaryPush} {
		if _, ok := m[b]; !ok {
			t.Fatalf("report has no row %q: %+v", b, r.Rows)
		}
	}
	for _, b := range []string{verify.BoundaryOutbox, verify.BoundaryRelay, verify.BoundaryInbox} {
		if _, ok := m[b]; ok {
			t.Fatalf("report with the database as the queue has a row %q: %+v", b, r.Rows)
		}
	}
	return m
}

func TestVerifyDBQueue(t *testing.T) {
	t.Parallel()
	mysql := testsvc.MySQLURL()
	for _, db := range []struct{ name, url, reach string }{
		{"sqlite", "", ""},
		{"postgres", testsvc.PostgresURL(), "127.0.0.1:5432"},
		{"mysql", mysql, hostOf(t, mysql)},
	} {
		t.Run(db.name, func(t *testing.T) {
			t.Parallel()
			// The timeout bounds a hang: under -race beside other packages the
			// payment step of a run can take minutes to catch up.
			args := []string{"--fault-rate", "0.3", "--broker", "db:", "--timeout", "5m"}
			if db.url != "" {
				testsvc.Reach(t, db.name, db.reach)
				args = append(args, "--db", db.url)
			}
			r, err := verifyReport(t, dbQueueOps, args...)
			if err != nil || !r.OK() {
				t.Fatalf("verify --broker db: on %s: %v\n%+v", db.name, err, r)
			}
			m := dbQueueRows(t, r)
			for _, row := range r.Rows {
				if row.Lost != 0 || row.DuplicatedEffects != 0 || row.LateDuplicates != 0 {
					t.Errorf("row %+v lost or doubled", row)
				}
			}
			if r.Balance != r.OrderSum || r.Unsettled != 0 {
				t.Errorf("balance %d, orders sum %d, unsettled %d", r.Balance, r.OrderSum, r.Unsettled)
			}
			if q := m[verify.BoundaryQueue]; q.EffectsApplied != r.Ops || q.Attempts != r.Ops {
				t.Errorf("queue row %+v: want one message per order (%d)", q, r.Ops)
			}
			// The faults really happened: kills at every point, pauses past the
			// lease that another consumer took over, cuts where there is a proxy.
			for _, k := range []string{chaos.FaultCrashBeforeEffect, chaos.FaultCrashAfterEffect, chaos.FaultCrashAfterCommit, chaos.FaultPaused, verify.FaultRestart} {
				if r.Faults[k] == 0 {
					t.Errorf("no %s fault in %v", k, r.Faults)
				}
			}
			// No fault a database queue does not have.
			for _, k := range []string{chaos.FaultLostAck, chaos.FaultDuplicateDelivery, chaos.FaultRelayCrash, chaos.FaultPublishError, verify.FaultBrokerCut} {
				if r.Faults[k] != 0 {
					t.Errorf("%d %s faults with the database as the queue: %v", r.Faults[k], k, r.Faults)
				}
			}
			q := r.Queue
			if q == nil {
				t.Fatal("no queue figures in the report")
			}
			if q.Takeovers == 0 || q.Redeliveries == 0 || q.Claims != m[verify.BoundaryQueueConsumer].Attempts {
				t.Errorf("queue %+v: want lease takeovers, redeliveries, and the claims as the consumer row's attempts", q)
			}
			if q.Outcomes["applied"] != m[verify.BoundaryQueueConsumer].EffectsApplied || q.Outcomes[""] != 0 {
				t.Errorf("queue rows by outcome %v: want one applied per ledger effect (%d), none unfinished", q.Outcomes, m[verify.BoundaryQueueConsumer].EffectsApplied)
			}
			t.Logf("%s: %d claims, %d redeliveries, %d lease takeovers, %d retirements refused for a lost lease; faults %v",
				db.name, q.Claims, q.Redeliveries, q.Takeovers, q.LeaseLost, r.Faults)
			if db.url != "" && r.Faults[verify.FaultDBCut] == 0 {
				t.Errorf("%s run without database cuts: %v", db.name, r.Faults)
			}
			if a := r.Audit; a == nil || a.Skipped == "" {
				t.Errorf("audit %+v: want it skipped, with the reason", a)
			}
		})
	}
}

// The negative control: the plain at-least-once queue (retired after the
// commit, no keys) doubles the effects of consumers killed after their commit.
func TestVerifyDBQueueUnsafeFails(t *testing.T) {
	t.Parallel()
	r, err := verifyReport(t, 600, "--fault-rate", "0.3", "--broker", "db:", "--unsafe")
	var fail *cli.ExitError
	if !errors.As(err, &fail) || r.OK() {
		t.Fatalf("--broker db: --unsafe returned %v (ok %v), want a failing verdict", err, r.OK())
	}
	m := dbQueueRows(t, r)
	if row := m[verify.BoundaryQueueConsumer]; row.DuplicatedEffects == 0 || r.Faults[chaos.FaultCrashAfterCommit] == 0 {
		t.Fatalf("--unsafe consumer row %+v (faults %v), want effects doubled by consumers killed after their commit", row, r.Faults)
	}
	if ok := m[verify.BoundaryQueueConsumer].BalanceOK; ok == nil || *ok {
		t.Fatalf("--unsafe balance reported exact: %+v", m[verify.BoundaryQueueConsumer])
	}
}

// --broker db: has no broker to lose messages and no relay: --broker-loss and
// --relay cdc are usage errors that say why; db: takes nothing after the colon.
func TestVerifyDBQueueUsage(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--broker", "db:", "--broker-loss", "0.02"}, "--broker-loss 0.02 with --broker db:: there is no broker to lose messages"},
		{[]string{"--broker", "db:", "--relay", "cdc"}, "--relay cdc with --broker db:: no relay runs"},
	} {
		_, stderr, err := run(t, append([]string{"verify"}, tc.args...)...)
		if !errors.Is(err, cli.ErrUsage) || !strings.Contains(stderr, tc.want) {
			t.Errorf("verify %v: %v %q; want a usage error saying %q", tc.args, err, stderr, tc.want)
		}
	}
	_, _, err := run(t, "verify", "--ops", "10", "--broker", "db:whatever")
	if err == nil || !strings.Contains(err.Error(), "db: takes nothing after the colon") {
		t.Errorf("--broker db:whatever: %v, want an error naming --broker", err)
	}
}
