package main

import (
	"strings"
	"testing"

	"github.com/idemhq/idem/cmd/idem/internal/verify"
	"github.com/idemhq/idem/internal/testsvc"
)

// idem verify --db-crash 2 kills the run's private database server twice while
// the orders are placed and restarts it at once: nothing lost or doubled, both
// kills happened, and orders were acknowledged after each restart with no
// component restarted for it (the flow's own supervisors aside).
func TestVerifyDBCrash(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, db string
		need     func(testing.TB)
	}{
		{"postgres", "postgres:", testsvc.PostgresServerBinaries},
		{"mariadb", "mysql:", testsvc.MariaDBServerBinaries},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.need(t)
			const ops = 300
			r, err := verifyReport(t, ops, "--db", tc.db, "--db-crash", "2")
			if err != nil || !r.OK() {
				t.Fatalf("verify --db %s --db-crash 2: %v\n%+v\n%+v", tc.db, err, r, r.DBCrash)
			}
			c := r.DBCrash
			if c == nil || c.Asked != 2 || c.Kills != 2 || c.Restarts != 2 || len(c.Outages) != 2 || r.Faults[verify.FaultDBCrash] != 2 {
				t.Fatalf("database crash %+v, faults %v: want 2 kills and 2 restarts", c, r.Faults)
			}
			for i, o := range c.Outages {
				if o.PlacedAfter == 0 || o.Down <= 0 || o.FirstAck < o.Down {
					t.Errorf("crash %d: %+v: want orders acknowledged after the restart, and the outage measured", i+1, o)
				}
			}
			for _, row := range r.Rows {
				if row.Lost != 0 || row.DuplicatedEffects != 0 || row.EffectsApplied == 0 {
					t.Errorf("row %+v", row)
				}
			}
		})
	}
}

// --db-crash needs a server the run owns, and says which.
func TestVerifyDBCrashUsage(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--db-crash", "1", "--db", ""}, "a crash of the embedded database is a crash of the process"},
		{[]string{"--db-crash", "1", "--db", "sqlite:"}, "see the consumer/relay kills"},
		{[]string{"--db-crash", "1", "--db", "postgres://root@127.0.0.1:5432/test"}, "pass --db postgres: (a private PostgreSQL) or --db mysql:"},
		{[]string{"--db-crash", "-1", "--db", "postgres:"}, "--db-crash must be 0 or more"},
	} {
		_, stderr, err := run(t, append([]string{"verify", "--ops", "1"}, tc.args...)...)
		if err == nil || !strings.Contains(stderr+err.Error(), tc.want) {
			t.Errorf("verify %v: %v, stderr %q; want %q", tc.args, err, stderr, tc.want)
		}
	}
}
