package main

import (
	"strings"
	"testing"

	"github.com/idemhq/idem/internal/testsvc"
)

// idem verify --failover kills the primary of a private three-node PostgreSQL
// halfway through the orders and promotes a standby. Synchronous replication
// must lose nothing acknowledged and double nothing; asynchronous may lose what
// the old primary acknowledged and no standby had (not asserted: on loopback it
// rarely happens), but the run completes and its counts agree with its rows.
func TestVerifyFailover(t *testing.T) {
	testsvc.PostgresServerBinaries(t) // initdb, pg_ctl and pg_basebackup, for verify's private cluster
	for _, mode := range []string{"sync", "async"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			const ops = 200
			r, err := verifyReport(t, ops, "--failover", mode, "--clients", "8")
			fo := r.Failover
			if fo == nil {
				t.Fatalf("no failover section: %v\n%+v", err, r)
			}
			if fo.Error != "" || fo.Promoted == "" || fo.Mode != mode || fo.KilledAfter < ops/2 {
				t.Fatalf("the failover did not happen as asked: %+v", fo)
			}
			if fo.Outage <= 0 || fo.APIResumed <= 0 || fo.RelayResumed <= 0 || fo.ConsumersResumed <= 0 {
				t.Errorf("a component did not resume after the promotion: %+v", fo)
			}
			lost, doubled := 0, 0
			for _, row := range r.Rows {
				lost += row.Lost
				doubled += row.DuplicatedEffects
			}
			if fo.Lost != lost || fo.Doubled != doubled || fo.AckedAbsent > fo.Lost || r.Rows[0].Lost != fo.AckedAbsent {
				t.Errorf("failover counts %+v disagree with the rows %+v", fo, r.Rows)
			}
			ok := lost == 0 && doubled == 0 && r.Unsettled == 0
			if (err == nil) != ok || r.OK() != ok {
				t.Errorf("exit error %v, OK() %v, but lost %d, doubled %d, unsettled %d", err, r.OK(), lost, doubled, r.Unsettled)
			}
			if mode == "sync" && (!ok || fo.AckedAbsent != 0) {
				t.Errorf("sync: lost %d (acknowledged and absent %d), doubled %d, unsettled %d: want none\n%+v", lost, fo.AckedAbsent, doubled, r.Unsettled, r.Rows)
			}
			t.Logf("%s: %+v", mode, *fo)
		})
	}
}

// --failover refuses what it cannot run on, naming the flag.
func TestVerifyFailoverUsage(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--failover", "both"}, "--failover must be sync or async"},
		{[]string{"--failover", "sync", "--relay", "cdc"}, "--failover with --relay cdc"},
		{[]string{"--failover", "async", "--db", "postgres://root@127.0.0.1:5432/test"}, "leave --db out"},
	} {
		_, stderr, err := run(t, append([]string{"verify", "--ops", "1"}, c.args...)...)
		if err == nil || !strings.Contains(err.Error()+stderr, c.want) {
			t.Errorf("verify %v: %v %q; want %q", c.args, err, stderr, c.want)
		}
	}
}
