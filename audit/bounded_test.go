package audit_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemhq/idem/audit"
)

// TestBoundedPages audits more rows than a page holds, on each kind of producer
// database: 2,500 published rows, seven at a time with one published_at (as a
// relay marks a batch), read 100 a page, so that ties straddle page boundaries.
// Each row is counted once: none skipped, none twice.
func TestBoundedPages(t *testing.T) { forEachKind(t, testBoundedPages) }

func testBoundedPages(t *testing.T, kind string) {
	const n, perInstant, pageSize = 2500, 7, 100
	ctx := context.Background()
	prod, cons := openDB(t, kind), openDB(t, "sqlite")
	const topic = "orders"
	base := time.Now().Add(-10 * time.Minute).UnixMilli()
	seedPublished(t, prod, topic, n, base-1000, func(i int) int64 { return base + int64(i/perInstant) })
	scanned := n
	if kind != "mysql" { // whose topic column holds 255 characters
		// A row written by hand with a topic too long to be audited, inside the
		// first page: read and skipped, not the end of the run.
		prod.exec(t, `INSERT INTO idem_outbox (msg_id, topic, ordering_key, part, headers, payload, created_at, available_at,
			attempts, published_at) VALUES ('long', $1, '', 0, '{}', $2, $3, $3, 1, $4)`, strings.Repeat("t", 1100), []byte("p"), base-1000, base+5)
		scanned++
	}
	// The consumer applied all but every tenth.
	applied := applyKeys(t, cons, "ledger", n, func(i int) bool { return i%10 != 0 })
	side, err := audit.ConsumersIn(cons.tx, audit.Consumer{Name: "ledger", Topics: []string{topic}})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	a, err := audit.New(prod.tx, audit.Config{PageSize: pageSize, Grace: time.Minute, Repair: true, MaxRepairs: 10,
		Registerer: reg, Logger: quiet}, side)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := a.Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Scanned != int64(scanned) || rep.Pages != n/pageSize+1 {
		t.Errorf("read %d rows in %d pages, want %d in %d", rep.Scanned, rep.Pages, scanned, n/pageSize+1)
	}
	row := onlyRow(t, rep, topic, "ledger")
	checkCounts(t, "paged audit", row, audit.Row{Published: n, Applied: int64(applied), Missing: n - int64(applied)})
	if len(row.MissingIDs) != audit.DefaultExamples || row.MissingIDs[0] != "msg-0000" || row.MissingIDs[1] != "msg-0010" {
		t.Errorf("MissingIDs = %v, want the %d oldest: msg-0000, msg-0010, …", row.MissingIDs, audit.DefaultExamples)
	}
	if got := repairedIDs(rep.Repaired); len(got) != 10 || got[0] != "msg-0000" || got[9] != "msg-0090" {
		t.Errorf("MaxRepairs 10 republished %v, want the 10 oldest missing", got)
	}
	// The metrics carry the report.
	for state, want := range map[string]float64{"published": n, "applied": float64(applied), "missing": float64(n - applied), "republished": 0} {
		if got := metricValue(t, reg, "idem_audit_messages", map[string]string{"topic": topic, "consumer": "ledger", "state": state}); got != want {
			t.Errorf("idem_audit_messages{state=%q} = %v, want %v", state, got, want)
		}
	}
	if got := metricValue(t, reg, "idem_audit_repaired_total", map[string]string{"topic": topic}); got != 10 {
		t.Errorf("idem_audit_repaired_total = %v, want 10", got)
	}
	if got := metricValue(t, reg, "idem_audit_runs_total", map[string]string{"outcome": "ok"}); got != 1 {
		t.Errorf("idem_audit_runs_total{outcome=ok} = %v, want 1", got)
	}
}

// A row another service wrote with text where a time belongs (SQLite keeps it)
// is counted as published and unauditable; the rows around it are audited, and
// the run does not fail on it.
func TestForeignRowDoesNotStopTheRun(t *testing.T) {
	const n = 50
	ctx := context.Background()
	prod, cons := openDB(t, "sqlite"), openDB(t, "sqlite")
	base := time.Now().Add(-10 * time.Minute).UnixMilli()
	seedPublished(t, prod, "orders", n, base, func(i int) int64 { return base + int64(i) })
	prod.exec(t, `INSERT INTO idem_outbox (msg_id, topic, ordering_key, part, headers, payload, created_at, available_at,
		attempts, published_at) VALUES ('foreign', 'orders', '', 0, '{}', $1, 'yesterday', 0, 1, $2)`, []byte("p"), base+10)
	applied := applyKeys(t, cons, "ledger", n, func(i int) bool { return i%5 != 0 })
	side, err := audit.ConsumersIn(cons.tx, audit.Consumer{Name: "ledger", Topics: []string{"orders"}})
	if err != nil {
		t.Fatal(err)
	}
	a, err := audit.New(prod.tx, audit.Config{Grace: time.Minute, PageSize: 20, Logger: quiet}, side)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := a.Run(ctx)
	if err != nil {
		t.Fatalf("the run failed on the foreign row: %v", err)
	}
	row := onlyRow(t, rep, "orders", "ledger")
	if rep.Scanned != n+1 || row.Published != n+1 || row.Unauditable != 1 || row.Applied != int64(applied) || row.Missing != int64(n-applied) {
		t.Errorf("read %d rows: %+v; want %d published, 1 unauditable, %d applied, %d missing", rep.Scanned, row, n+1, applied, n-applied)
	}
}
