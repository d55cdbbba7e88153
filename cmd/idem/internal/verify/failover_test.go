package verify

import (
	"strings"
	"testing"
	"time"
)

// The failover section blames an asynchronous loss on the database, calls a
// synchronous one a failure, and says when the failover did not happen.
func TestFailoverReportWrite(t *testing.T) {
	for _, c := range []struct {
		st   FailoverReport
		want string
	}{
		{FailoverReport{Mode: "sync", Promoted: "s1", Outage: time.Second, APIResumed: time.Second}, "nothing acknowledged was lost"},
		{FailoverReport{Mode: "async", Promoted: "s2", AckedAbsent: 3, Lost: 5}, "lost by the database, not by idem"},
		{FailoverReport{Mode: "sync", Promoted: "s1", Lost: 1}, "synchronous replication must lose nothing acknowledged: this is a failure"},
		{FailoverReport{Mode: "sync", Error: "promote a standby: boom"}, "did not happen: promote a standby: boom"},
		{FailoverReport{Mode: "async", Promoted: "s1"}, "consumers received at not within a minute"},
	} {
		var b strings.Builder
		c.st.write(&b)
		if !strings.Contains(b.String(), c.want) {
			t.Errorf("%+v wrote\n%s\nwant %q", c.st, b.String(), c.want)
		}
	}
}
