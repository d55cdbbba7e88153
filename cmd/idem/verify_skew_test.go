package main

import (
	"strings"
	"testing"
	"time"

	"github.com/idemhq/idem/internal/testsvc"
)

// idem verify --skew 2s gives the gateways, consumers and payment workers
// clocks 2 s apart: nothing lost or doubled, and the report's clock skew
// section lists each node's offset and which clock each store trusts (the
// caller's on SQLite, the server's on PostgreSQL).
//
// 2 s rather than 10 s: the leases grow to 2×D, and a killed payment worker's
// effect waits a lease (±D) for its takeover, several times in a row when the
// retry is killed again; at 10 s the pair took 97 s under -race on 2 cores.
// docs/scaling.md gives the figures of 10 s runs.
func TestVerifySkew(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, db, keyStoreClock string
		need                    func(testing.TB)
	}{
		{"sqlite", "sqlite:", "caller", func(testing.TB) {}},
		{"postgres", testsvc.PostgresURL(), "server", func(t testing.TB) { testsvc.ReachURL(t, "postgres", testsvc.PostgresURL()) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.need(t)
			const ops, skew = 300, 2 * time.Second
			r, err := verifyReport(t, ops, "--db", tc.db, "--skew", skew.String())
			if err != nil || !r.OK() {
				t.Fatalf("verify --db %s --skew %v: %v\n%+v", tc.db, skew, err, r)
			}
			s := r.Skew
			if s == nil {
				t.Fatalf("no clock skew section: %+v", r)
			}
			if s.Skew != skew || s.FenceLease*2 <= 3*skew || s.Tolerance <= s.Skew {
				t.Errorf("skew %v, fence lease %v, tolerance %v: want %v, a lease above 1.5×D and a tolerance above D", s.Skew, s.FenceLease, s.Tolerance, skew)
			}
			offsets := map[string]time.Duration{}
			for _, n := range s.Nodes {
				offsets[n.Node] = n.Offset
			}
			for _, pair := range [][2]string{{"gateway 1", "gateway 2"}, {"consumer 1", "consumer 2"}, {"payment worker 1", "payment worker 2"}} {
				a, aok := offsets[pair[0]]
				b, bok := offsets[pair[1]]
				if !aok || !bok || a-b != skew {
					t.Errorf("%s at %v (%v), %s at %v (%v): want %v apart", pair[0], a, aok, pair[1], b, bok, skew)
				}
			}
			var keyStore string
			for _, st := range s.Stores {
				if strings.HasPrefix(st.Component, "key store") {
					keyStore = st.Clock
				}
			}
			if keyStore != tc.keyStoreClock {
				t.Errorf("key store trusts the %q clock; want %q (%+v)", keyStore, tc.keyStoreClock, s.Stores)
			}
			for _, row := range r.Rows {
				if row.Lost != 0 || row.DuplicatedEffects != 0 || row.EffectsApplied == 0 {
					t.Errorf("row %+v", row)
				}
			}
		})
	}
}

// --skew refuses what it cannot run, naming the flag and the limit.
func TestVerifySkewUsage(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--skew", "-1s"}, "--skew must be 0 or more"},
		{[]string{"--skew", "11m", "--timeout", "1h"}, "--skew 11m0s is above the limit of 10m0s"},
		{[]string{"--skew", "1m"}, "--skew 1m0s needs --timeout 3m0s or more"},
		{[]string{"--skew", "ten"}, "invalid value \"ten\" for flag -skew"},
	} {
		_, stderr, err := run(t, append([]string{"verify", "--ops", "1"}, tc.args...)...)
		if err == nil || !strings.Contains(stderr+err.Error(), tc.want) {
			t.Errorf("verify %v: %v, stderr %q; want %q", tc.args, err, stderr, tc.want)
		}
	}
}
