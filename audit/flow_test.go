package audit_test

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/idemhq/idem/audit"
)

// grace is the audits' Config.Grace in the flow tests. Their clock is set past
// it, so nothing waits for it (but the stream's dedup window: relayOnForCopies).
const grace = time.Second

// past returns the audit instant at which everything published so far is
// older than grace.
func past() time.Time { return time.Now().Add(grace + 500*time.Millisecond) }

// lostEvery17th loses msg-0000, msg-0017, msg-0034, …
func lostEvery17th(id string) bool {
	n, err := strconv.Atoi(strings.TrimPrefix(id, "msg-"))
	return err == nil && n%17 == 0
}

// TestFlowAcrossDatabases runs a real flow with its producer and its consumer in
// databases of different kinds: an outbox, a real relay to JetStream through a
// broker that acknowledges and loses every 17th message, an inbox consumer that
// dead-letters one message. The audit finds exactly the lost messages, the
// repair republishes exactly them, once, and the consumer applies each once.
func TestFlowAcrossDatabases(t *testing.T) {
	for _, pair := range []struct{ producer, consumer string }{
		{"sqlite", "postgres"},
		{"postgres", "mysql"},
		{"mysql", "sqlite"},
	} {
		t.Run(pair.producer+"_to_"+pair.consumer, func(t *testing.T) {
			t.Parallel()
			testFlow(t, pair.producer, pair.consumer)
		})
	}
}

func testFlow(t *testing.T, producerKind, consumerKind string) {
	const n = 300
	ctx := context.Background()
	prod, cons := openDB(t, producerKind), openDB(t, consumerKind)
	f := newFlow(t, prod, lostEvery17th)
	ids := f.enqueue(n)
	var lost []string
	for _, id := range ids {
		if lostEvery17th(id) {
			lost = append(lost, id)
		}
	}
	k := len(lost)
	// The consumer also refuses one message for good: dead-lettered, never
	// missing, never republished.
	const refused = "msg-0005"
	ledger := f.consume("ledger", cons, consumerOpts{deadLetter: func(id string) bool { return id == refused }})
	f.relayOn()
	ledger.waitLedger(t, n-k-1)
	eventually(t, "the consumer to dead-letter "+refused, func() bool {
		return cons.count(t, "SELECT COUNT(*) FROM idem_dead_letters WHERE consumer = 'ledger' AND msg_id = $1", refused) == 1
	})
	waitPublished(t, f)

	side, err := audit.ConsumersIn(cons.tx, audit.Consumer{Name: "ledger", Topics: []string{f.topic}})
	if err != nil {
		t.Fatal(err)
	}
	clk := &clock{}
	clk.set(past())
	cfg := audit.Config{Grace: grace, Now: clk.now, Examples: n, Logger: quiet}
	auditor, err := audit.New(prod.tx, cfg, side)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := auditor.Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	row := onlyRow(t, rep, f.topic, "ledger")
	want := audit.Row{Topic: f.topic, Consumer: "ledger", Published: n, Applied: int64(n - k - 1), DeadLettered: 1, Missing: int64(k)}
	checkCounts(t, "first audit", row, want)
	if !slices.Equal(sorted(row.MissingIDs), lost) {
		t.Errorf("MissingIDs = %v, want the lost %v", row.MissingIDs, lost)
	}
	if row.Latency.Count != int64(n-k-1) || row.Latency.Max <= 0 || row.Latency.P50 > row.Latency.Max {
		t.Errorf("latency %+v: want a count of %d, a positive max", row.Latency, n-k-1)
	}
	if rep.Missing() != int64(k) || len(rep.Repaired) != 0 || len(rep.Blind) != 0 || rep.Truncated {
		t.Errorf("report: missing %d, repaired %d, blind %v, truncated %v; want %d missing and nothing else", rep.Missing(), len(rep.Repaired), rep.Blind, rep.Truncated, k)
	}

	// Repair, with the relay stopped: the copies wait in the outbox.
	f.relayOff()
	cfg.Repair = true
	repairer, err := audit.New(prod.tx, cfg, side)
	if err != nil {
		t.Fatal(err)
	}
	rep, err = repairer.Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := repairedIDs(rep.Repaired); !slices.Equal(got, lost) {
		t.Fatalf("the repair republished %v, want exactly the lost %v", got, lost)
	}
	checkCounts(t, "repairing audit", onlyRow(t, rep, f.topic, "ledger"), want)
	recorded, err := repairer.Repairs(ctx, 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	if got := repairedIDs(recorded); !slices.Equal(got, lost) {
		t.Errorf("Auditor.Repairs recorded %v, want %v", got, lost)
	}
	for _, r := range recorded {
		if r.CopyID <= r.OrigID || !slices.Equal(r.Consumers, []string{"ledger"}) || r.Topic != f.topic || r.Reason == "" {
			t.Errorf("recorded repair %+v: want a later copy row, consumer ledger, topic %s, a reason", r, f.topic)
		}
	}
	if p := f.pending(); p != k {
		t.Errorf("%d outbox rows pending after the repair, want the %d copies", p, k)
	}

	// A second run at once: the copies are on their way, not missing again.
	rep, err = repairer.Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Repaired) != 0 {
		t.Errorf("a second repair run within grace republished %v", repairedIDs(rep.Repaired))
	}
	checkCounts(t, "second repairing audit", onlyRow(t, rep, f.topic, "ledger"),
		audit.Row{Published: n, Applied: int64(n - k - 1), DeadLettered: 1, InFlight: int64(k), Repairing: int64(k)})

	// The relay publishes the copies; the consumer applies each once.
	f.relayOnForCopies()
	ledger.waitLedger(t, n-1)
	waitPublished(t, f)
	clk.set(past())
	rep, err = repairer.Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Repaired) != 0 {
		t.Errorf("the audit after the repair republished %v", repairedIDs(rep.Repaired))
	}
	checkCounts(t, "audit after the repair", onlyRow(t, rep, f.topic, "ledger"),
		audit.Row{Published: n, Applied: n - 1, DeadLettered: 1, Republished: int64(k)})
	if recorded, _ := repairer.Repairs(ctx, 0, 1000); len(recorded) != k {
		t.Errorf("%d repairs recorded in all, want %d", len(recorded), k)
	}
}

// waitPublished waits until the relay has published every row.
func waitPublished(t *testing.T, f *flow) {
	t.Helper()
	eventually(t, "the relay to publish every row", func() bool { return f.pending() == 0 })
}

func onlyRow(t testing.TB, rep *audit.Report, topic, consumer string) audit.Row {
	t.Helper()
	for _, r := range rep.Rows {
		if r.Topic == topic && r.Consumer == consumer {
			return r
		}
	}
	t.Fatalf("no row for topic %s, consumer %s in %+v", topic, consumer, rep.Rows)
	return audit.Row{}
}

// checkCounts compares the counts of got with want's (Topic and Consumer too
// where want sets them).
func checkCounts(t testing.TB, when string, got, want audit.Row) {
	t.Helper()
	type counts struct{ Published, Applied, DeadLettered, Missing, InFlight, Repairing, Republished, Unauditable int64 }
	c := func(r audit.Row) counts {
		return counts{r.Published, r.Applied, r.DeadLettered, r.Missing, r.InFlight, r.Repairing, r.Republished, r.Unauditable}
	}
	if c(got) != c(want) || (want.Topic != "" && got.Topic != want.Topic) || (want.Consumer != "" && got.Consumer != want.Consumer) {
		t.Errorf("%s: row %s/%s counts %+v, want %+v", when, got.Topic, got.Consumer, c(got), c(want))
	}
}

func repairedIDs(rs []audit.Repair) []string {
	out := make([]string, 0, len(rs))
	for _, r := range rs {
		out = append(out, r.MsgID)
	}
	slices.Sort(out)
	return out
}

func sorted(ids []string) []string {
	out := slices.Clone(ids)
	slices.Sort(out)
	return out
}
