package audit_test

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/idemhq/idem/audit"
)

// TestSafety runs one topic to two consumers in two databases, neither the
// producer's: "alpha" (PostgreSQL) and "beta" (SQLite). The broker loses
// msg-0007 for both; alpha alone loses msg-0013 (beta applies it); alpha
// dead-letters msg-0021 (beta applies it). The audit repairs the two lost
// messages once each, within its bounds, never the dead-lettered one, never
// while a blind consumer reads the topic; beta drops the copy of msg-0013 by its
// key.
func TestSafety(t *testing.T) {
	t.Parallel()
	const n = 60
	ctx := context.Background()
	is := func(ids ...string) func(string) bool { return func(id string) bool { return slices.Contains(ids, id) } }
	prod, dbA, dbB := openDB(t, "sqlite"), openDB(t, "postgres"), openDB(t, "sqlite")
	f := newFlow(t, prod, is("msg-0007"))
	f.enqueue(n)
	alpha := f.consume("alpha", dbA, consumerOpts{lose: is("msg-0013"), deadLetter: is("msg-0021")})
	beta := f.consume("beta", dbB, consumerOpts{})
	f.relayOn()
	alpha.waitLedger(t, n-3)
	beta.waitLedger(t, n-1)
	eventually(t, "alpha to dead-letter msg-0021", func() bool {
		return dbA.count(t, "SELECT COUNT(*) FROM idem_dead_letters WHERE consumer = 'alpha'") == 1
	})
	waitPublished(t, f)
	f.relayOff() // the repairs' copies wait in the outbox until the end

	sideA, err := audit.ConsumersIn(dbA.tx, audit.Consumer{Name: "alpha", Topics: []string{f.topic}})
	if err != nil {
		t.Fatal(err)
	}
	sideB, err := audit.ConsumersIn(dbB.tx, audit.Consumer{Name: "beta", Topics: []string{f.topic}})
	if err != nil {
		t.Fatal(err)
	}
	clk := &clock{}
	clk.set(past())
	c1 := clk.now()
	auditor := func(cfg audit.Config, sides ...*audit.Side) *audit.Auditor {
		t.Helper()
		cfg.Grace, cfg.Now, cfg.Logger = grace, clk.now, quiet
		a, err := audit.New(prod.tx, cfg, sides...)
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	run := func(a *audit.Auditor) *audit.Report {
		t.Helper()
		rep, err := a.Run(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return rep
	}

	rep := run(auditor(audit.Config{}, sideA, sideB))
	rowA, rowB := onlyRow(t, rep, f.topic, "alpha"), onlyRow(t, rep, f.topic, "beta")
	checkCounts(t, "alpha", rowA, audit.Row{Published: n, Applied: n - 3, DeadLettered: 1, Missing: 2})
	checkCounts(t, "beta", rowB, audit.Row{Published: n, Applied: n - 1, Missing: 1})
	if !slices.Equal(sorted(rowA.MissingIDs), []string{"msg-0007", "msg-0013"}) || !slices.Equal(rowB.MissingIDs, []string{"msg-0007"}) {
		t.Errorf("missing ids: alpha %v, beta %v; want [msg-0007 msg-0013], [msg-0007]", rowA.MissingIDs, rowB.MissingIDs)
	}

	// A blind consumer of the topic: reported, and no message of the topic repaired.
	sideBlind, err := audit.ConsumersIn(dbB.tx, audit.Consumer{Name: "beta", Topics: []string{f.topic}},
		audit.Consumer{Name: "gamma", Topics: []string{f.topic}})
	if err != nil {
		t.Fatal(err)
	}
	rep = run(auditor(audit.Config{Repair: true}, sideA, sideBlind))
	if len(rep.Blind) != 1 || rep.Blind[0].Consumer != "gamma" || rep.Blind[0].Reason == "" {
		t.Errorf("Blind = %+v, want gamma with a reason", rep.Blind)
	}
	if len(rep.Repaired) != 0 {
		t.Errorf("repaired %v on a topic a blind consumer reads", repairedIDs(rep.Repaired))
	}
	checkCounts(t, "gamma (blind)", onlyRow(t, rep, f.topic, "gamma"), audit.Row{Published: n})
	checkCounts(t, "alpha beside a blind consumer", onlyRow(t, rep, f.topic, "alpha"), audit.Row{Published: n, Applied: n - 3, DeadLettered: 1, Missing: 2})

	// MaxRepairs 1: one message per run (the oldest published first); a
	// repaired message is in flight, not missing, within grace.
	reg := prometheus.NewRegistry()
	one := auditor(audit.Config{Repair: true, MaxRepairs: 1, Registerer: reg}, sideA, sideB)
	missedBy := map[string][]string{"msg-0007": {"alpha", "beta"}, "msg-0013": {"alpha"}}
	var order []string
	for i := range 2 {
		rep = run(one)
		if len(rep.Repaired) != 1 || missedBy[rep.Repaired[0].MsgID] == nil || slices.Contains(order, rep.Repaired[0].MsgID) {
			t.Fatalf("run %d with MaxRepairs 1 republished %v, want one of msg-0007 and msg-0013 not yet repaired", i+1, repairedIDs(rep.Repaired))
		}
		r := rep.Repaired[0]
		order = append(order, r.MsgID)
		if !slices.Equal(r.Consumers, missedBy[r.MsgID]) {
			t.Errorf("%s repaired for %v, want %v", r.MsgID, r.Consumers, missedBy[r.MsgID])
		}
	}
	checkCounts(t, "alpha, one repairing", onlyRow(t, rep, f.topic, "alpha"),
		audit.Row{Published: n, Applied: n - 3, DeadLettered: 1, Missing: 1, InFlight: 1, Repairing: 1})
	rep = run(one)
	if len(rep.Repaired) != 0 {
		t.Errorf("a third run within grace republished %v", repairedIDs(rep.Repaired))
	}
	checkCounts(t, "alpha, both repairing", onlyRow(t, rep, f.topic, "alpha"),
		audit.Row{Published: n, Applied: n - 3, DeadLettered: 1, InFlight: 2, Repairing: 2})
	// The metrics carry the last report.
	if got := metricValue(t, reg, "idem_audit_repaired_total", map[string]string{"topic": f.topic}); got != 2 {
		t.Errorf("idem_audit_repaired_total = %v, want 2", got)
	}
	if got := metricValue(t, reg, "idem_audit_runs_total", map[string]string{"outcome": "ok"}); got != 3 {
		t.Errorf("idem_audit_runs_total{outcome=ok} = %v, want 3", got)
	}
	for state, want := range map[string]int64{"published": n, "applied": n - 3, "dead_lettered": 1, "missing": 0, "in_flight": 2} {
		if got := metricValue(t, reg, "idem_audit_messages", map[string]string{"topic": f.topic, "consumer": "alpha", "state": state}); got != float64(want) {
			t.Errorf("idem_audit_messages{consumer=alpha,state=%s} = %v, want %d", state, got, want)
		}
	}

	// Past grace, the copies still unpublished: missing again, but
	// MaxRepairsPerMessage 1 repairs neither a second time.
	clk.set(c1.Add(3 * grace))
	rep = run(auditor(audit.Config{Repair: true, MaxRepairsPerMessage: 1}, sideA, sideB))
	if len(rep.Repaired) != 0 {
		t.Errorf("MaxRepairsPerMessage 1 republished %v a second time", repairedIDs(rep.Repaired))
	}
	checkCounts(t, "alpha past grace, bound reached", onlyRow(t, rep, f.topic, "alpha"),
		audit.Row{Published: n, Applied: n - 3, DeadLettered: 1, Missing: 2})

	// The relay publishes the copies: alpha applies both, beta msg-0007 and
	// drops msg-0013 by its key.
	f.relayOnForCopies()
	alpha.waitLedger(t, n-1)
	beta.waitLedger(t, n)
	eventually(t, "beta to drop the copy of msg-0013 as a duplicate", func() bool {
		return deliveries(t, beta)["beta"].Duplicates >= 1
	})
	// The inbox counts a delivery once it is settled, after its commit: the
	// ledger can hold a message its counter does not yet.
	eventually(t, "alpha to count its last deliveries", func() bool {
		return deliveries(t, alpha)["alpha"].Processed >= n-1
	})
	eventually(t, "beta to count its last deliveries", func() bool {
		return deliveries(t, beta)["beta"].Processed >= n
	})
	waitPublished(t, f)

	clk.set(past())
	cfg := audit.Config{Repair: true, Deliveries: audit.GatherDeliveries(prometheus.Gatherers{alpha.reg, beta.reg})}
	rep = run(auditor(cfg, sideA, sideB))
	if len(rep.Repaired) != 0 {
		t.Errorf("the final audit republished %v", repairedIDs(rep.Repaired))
	}
	rowA, rowB = onlyRow(t, rep, f.topic, "alpha"), onlyRow(t, rep, f.topic, "beta")
	checkCounts(t, "alpha at the end", rowA, audit.Row{Published: n, Applied: n - 1, DeadLettered: 1, Republished: 2})
	checkCounts(t, "beta at the end", rowB, audit.Row{Published: n, Applied: n, Republished: 2})
	// Processed is exact (one per key); Duplicates at least the copy of
	// msg-0013 (JetStream may redeliver besides).
	if d := rowB.Deliveries; d == nil || d.Duplicates < 1 || d.Processed != n {
		t.Errorf("beta's deliveries %+v, want %d processed, a duplicate", d, n)
	}
	if d := rowA.Deliveries; d == nil || d.Processed != n-1 {
		t.Errorf("alpha's deliveries %+v, want %d processed", d, n-1)
	}
	recorded, err := one.Repairs(ctx, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	if got := repairedIDs(recorded); !slices.Equal(got, []string{"msg-0007", "msg-0013"}) {
		t.Errorf("repairs recorded: %v, want msg-0007 and msg-0013 once each (never the dead-lettered msg-0021)", got)
	}

	// The sentence and the text name the topic, the consumers and the counts.
	if rowB.Deliveries == nil {
		t.FailNow()
	}
	sentence := rep.Sentence()
	for _, want := range []string{
		f.topic + " → alpha:", f.topic + " → beta:",
		fmt.Sprintf("%d published, %d applied once, 1 dead-lettered, 0 missing", n, n-1),
		fmt.Sprintf("%d published, %d applied once, 0 dead-lettered, 0 missing", n, n),
		"2 republished by repair",
		fmt.Sprintf("%d duplicate deliveries suppressed", rowB.Deliveries.Duplicates),
	} {
		if !strings.Contains(sentence, want) {
			t.Errorf("the sentence lacks %q:\n%s", want, sentence)
		}
	}
	var text bytes.Buffer
	if err := rep.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"TOPIC", "CONSUMER", "MISSING", "alpha", "beta", f.topic, sentence} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("the text lacks %q:\n%s", want, text.String())
		}
	}
	t.Logf("\n%s", text.String())
}

// deliveries reads a consumer's delivery counts from its registry.
func deliveries(t testing.TB, c *consumer) map[string]audit.Delivered {
	t.Helper()
	d, err := audit.GatherDeliveries(c.reg).Deliveries(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// metricValue is the value of the counter or gauge name of g whose labels
// include labels; the test fails if there is none.
func metricValue(t testing.TB, g prometheus.Gatherer, name string, labels map[string]string) float64 {
	t.Helper()
	fams, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
	next:
		for _, m := range f.GetMetric() {
			for k, v := range labels {
				if !slices.ContainsFunc(m.GetLabel(), func(l *dto.LabelPair) bool { return l.GetName() == k && l.GetValue() == v }) {
					continue next
				}
			}
			if m.Counter != nil {
				return m.GetCounter().GetValue()
			}
			return m.GetGauge().GetValue()
		}
	}
	t.Fatalf("no metric %s%v", name, labels)
	return 0
}
