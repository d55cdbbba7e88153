//go:build unix

package console_test

import (
	"context"
	"log/slog"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/idemhq/idem/admin"
	"github.com/idemhq/idem/admin/console"
	"github.com/idemhq/idem/audit"
)

// fakeAudit finds m-9 missing until a repair republishes it; it records the
// runs it was asked for (their repair argument).
type fakeAudit struct {
	mu       sync.Mutex
	runs     []bool
	repaired bool
}

func (f *fakeAudit) Run(_ context.Context, repair bool) (*admin.AuditReport, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.runs = append(f.runs, repair)
	now := time.Now()
	row := audit.Row{Topic: "orders", Consumer: "billing", Published: 10, Applied: 8, DeadLettered: 1, Missing: 1,
		MissingIDs: []string{"m-9"}, Latency: audit.Latency{Count: 8, P99: 42 * time.Millisecond}}
	rep := &admin.AuditReport{At: now, From: now.Add(-time.Hour), To: now, Grace: 5 * time.Minute, Scanned: 10, Pages: 1}
	switch {
	case repair:
		rep.Repaired = []admin.AuditRepair{{CopyID: 11, OrigID: 9, MsgID: "m-9", Topic: "orders", Consumers: []string{"billing"}, At: now}}
		f.repaired = true
	case f.repaired:
		row.Missing, row.MissingIDs, row.InFlight, row.Repairing = 0, nil, 1, 1
	}
	rep.Rows = []audit.Row{row}
	return rep, nil
}

func (f *fakeAudit) Repairs(context.Context, string, int) (admin.AuditRepairPage, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.repaired {
		return admin.AuditRepairPage{}, nil
	}
	return admin.AuditRepairPage{Repairs: []admin.AuditRepair{{CopyID: 11, OrigID: 9, MsgID: "m-9", Topic: "orders",
		Consumers: []string{"billing"}, At: time.Now()}}}, nil
}

func (f *fakeAudit) asked() []bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.runs)
}

// TestBrowserAudit: the console's audit panel shows the audit's rows, and its
// Repair missing button asks for a reason and runs a repair (audited), after
// which the panel shows the repair; with the read token the button is disabled.
func TestBrowserAudit(t *testing.T) {
	needChromium(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	au := &fakeAudit{}
	var logs syncBuffer
	h, err := admin.New(admin.Config{Token: fullToken, ReadToken: readToken, Audit: au, Console: console.Handler(),
		Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(h)
	t.Cleanup(hs.Close)
	ui := openUI(ctx, t, hs.URL, &logs)
	ui.signIn(fullToken, "alice")

	row := `#audit tbody tr:first-child`
	ui.waitTrue("the audit's row", `!!document.querySelector('`+row+`') && document.querySelector('`+row+` td').textContent === 'orders'`)
	ui.wantText(row+` td:nth-child(2)`, "billing")
	ui.wantText(row+` td:nth-child(3)`, "10")
	ui.wantText(row+` td:nth-child(6)`, "1")
	ui.wantText(row+` td:nth-child(8)`, "42.0ms")
	ui.wantText(`#audit-notes li`, "missing at billing (orders): m-9")
	ui.wantText(`#audit-count`, "1")

	ui.run(`document.querySelector('#audit-actions button[data-action="repair"]').click()`)
	ui.waitTrue("the dialog", `document.getElementById('confirm').open`)
	ui.run(`document.getElementById('confirm-reason').value = 'broker lost m-9'; document.getElementById('confirm-form').requestSubmit()`)
	ui.waitTrue("the repair logged", `idemConsole.actions.some(a => a.ok && a.text === 'repair missing messages: 1 republished')`)
	ui.waitTrue("the repair listed", `!!document.querySelector('#audit-repairs tr[data-id="11"]')`)
	if got := au.asked(); !slices.Contains(got, true) {
		t.Fatalf("runs %v: no repair", got)
	}
	wantAudit(t, &logs, "POST /api/audit/repair", "broker lost m-9")

	ui.run(`document.getElementById('audit-run').click()`)
	ui.waitTrue("m-9 in flight after the repair", `document.querySelector('`+row+` td:nth-child(6)').textContent === '0' &&
		document.querySelector('`+row+` td:nth-child(7)').textContent === '1'`)
	ui.wantTrue("nothing to repair", `document.querySelector('#audit-actions button[data-action="repair"]').disabled`)
	ui.wantTrue("no policy violation", `idemConsole.violations.length === 0`)

	ui.run(`document.getElementById('signout').click()`)
	ui.waitTrue("the token form again", `!document.getElementById('login').hidden`)
	au.mu.Lock()
	au.repaired = false // missing again: the button is there, and disabled for the read token
	au.mu.Unlock()
	ui.signIn(readToken, "bob")
	ui.waitTrue("the audit's row", `!!document.querySelector('`+row+`') && document.querySelector('`+row+` td:nth-child(6)').textContent === '1'`)
	ui.wantTrue("repair disabled for the read token", `document.querySelector('#audit-actions button[data-action="repair"]').disabled`)
}
