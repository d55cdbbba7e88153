package verify

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// A repeat within the retention window is a duplicated effect; one a window or
// more after the first is a late duplicate, reported apart with its amount.
func TestDupes(t *testing.T) {
	t.Parallel()
	const ret = time.Hour
	at := func(d time.Duration) int64 { return int64(d) }
	for _, tc := range []struct {
		name       string
		es         []applied
		dup, late  int
		lateAmount int64
	}{
		{"none", nil, 0, 0, 0},
		{"once", []applied{{amount: 5, at: 0}}, 0, 0, 0},
		{"twice within the window", []applied{{amount: 5, at: at(time.Minute)}, {amount: 5, at: 0}}, 1, 0, 0},
		{"again after the window", []applied{{amount: 5, at: 0}, {amount: 7, at: at(ret)}}, 0, 1, 7},
		{"both", []applied{{amount: 1, at: at(2 * ret)}, {amount: 2, at: 0}, {amount: 3, at: at(time.Second)}}, 1, 1, 1},
	} {
		dup, late, amt := dupes(tc.es, ret)
		if dup != tc.dup || late != tc.late || amt != tc.lateAmount {
			t.Errorf("%s: dupes = %d, %d, %d; want %d, %d, %d", tc.name, dup, late, amt, tc.dup, tc.late, tc.lateAmount)
		}
	}
}

// The verdict fails on any lost, doubled or late applied effect and on a wrong
// balance, and names the boundary; refused late requests are what idem promises.
func TestReportVerdict(t *testing.T) {
	t.Parallel()
	yes, no := true, false
	for _, tc := range []struct {
		name      string
		rows      []Row
		unsettled int
		ok        bool
		says      string
	}{
		{"no rows", nil, 0, false, "no boundary checked"},
		{"exact", []Row{{Boundary: BoundaryInbox, EffectsApplied: 3, BalanceOK: &yes}}, 0, true, "OK: nothing lost, nothing doubled"},
		{"refused", []Row{{Boundary: BoundaryHTTP, EffectsApplied: 3, Refused: 2}}, 0, true, "2 late request(s) or message(s) refused, not applied"},
		{"late applied", []Row{{Boundary: BoundaryHTTP, EffectsApplied: 4, LateDuplicates: 1}}, 0, false, BoundaryHTTP + " applied 1 late request(s)"},
		{"late message applied", []Row{{Boundary: BoundaryInbox, EffectsApplied: 4, LateDuplicates: 2}}, 0, false, BoundaryInbox + " applied 2 late message(s)"},
		{"refused message", []Row{{Boundary: BoundaryInbox, EffectsApplied: 3, Refused: 1, BalanceOK: &yes}}, 0, true, "1 late request(s) or message(s) refused"},
		{"lost", []Row{{Boundary: BoundaryRelay, Lost: 2}}, 0, false, BoundaryRelay + " lost 2"},
		{"doubled", []Row{{Boundary: BoundaryHTTP, DuplicatedEffects: 1}}, 0, false, BoundaryHTTP + " doubled 1"},
		{"balance", []Row{{Boundary: BoundaryInbox, BalanceOK: &no}}, 0, false, BoundaryInbox + " balance wrong"},
		// A run that timed out says so, beside the effects it counts as lost.
		{"unsettled", []Row{{Boundary: BoundaryPayment, Lost: 3}}, 3, false, "did not settle in time, 3 step(s) pending"},
		{"unsettled note", []Row{{Boundary: BoundaryPayment, Lost: 3}}, 3, false, "run again with a longer --timeout"},
		// ... and which step had not caught up.
		{"unsettled steps", []Row{{Boundary: BoundaryPayment, Lost: 3}}, 3, false, "3 step(s) pending (0 unpublished, 0 unapplied, 1 unpaid, 2 unshown)"},
	} {
		r := &Report{Rows: tc.rows, Unsettled: tc.unsettled, Faults: map[string]int{}}
		if tc.unsettled > 0 {
			r.Pending = &Pending{Unpaid: 1, Unshown: tc.unsettled - 1}
		}
		var out bytes.Buffer
		if err := r.WriteTable(&out); err != nil {
			t.Fatal(err)
		}
		if r.OK() != tc.ok || !strings.Contains(out.String(), tc.says) {
			t.Errorf("%s: OK() = %v, want %v; table lacks %q:\n%s", tc.name, r.OK(), tc.ok, tc.says, out.String())
		}
	}
}
