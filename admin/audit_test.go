package admin_test

import (
	"slices"
	"testing"

	"github.com/idemhq/idem/admin"
)

type auditJSON struct {
	Rows []struct {
		Topic, Consumer string
		Published       int64    `json:"published"`
		Missing         int64    `json:"missing"`
		MissingIDs      []string `json:"missing_ids"`
		Latency         struct {
			P99 int64 `json:"p99_ns"`
		} `json:"latency"`
	} `json:"rows"`
	Blind    []any `json:"blind"`
	Repaired []struct {
		CopyID int64  `json:"copy_id"`
		MsgID  string `json:"msg_id"`
	} `json:"repaired"`
}

// TestAuditArea: GET /api/audit runs a read-only audit with either token; POST
// /api/audit/repair runs one with repair, only with the full token and a reason,
// and is audited; a read token's repair never reaches the Auditor.
func TestAuditArea(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	var rep auditJSON
	wantJSON(t, b.do(t, "GET", "/api/audit", readToken, ""), &rep)
	if len(rep.Rows) != 1 || rep.Rows[0].Missing != 1 || !slices.Equal(rep.Rows[0].MissingIDs, []string{"m9"}) ||
		rep.Rows[0].Latency.P99 != 40e6 || rep.Blind == nil || rep.Repaired == nil || len(rep.Repaired) != 0 {
		t.Fatalf("GET /api/audit: %+v", rep)
	}

	wantProblem(t, b.do(t, "POST", "/api/audit/repair", readToken, `{"reason":"broker lost messages"}`), 403, admin.ProblemForbidden)
	wantProblem(t, b.do(t, "POST", "/api/audit/repair", fullToken, `{}`), 400, admin.ProblemInvalid, "reason")
	wantProblem(t, b.do(t, "POST", "/api/audit/repair", fullToken, `{"reason":"x","repair":true}`), 400, admin.ProblemInvalid, "repair")
	if got := b.au.asked(); !slices.Equal(got, []bool{false}) {
		t.Fatalf("runs after refused repairs: %v, want only the read-only one", got)
	}

	rep = auditJSON{}
	wantJSON(t, b.do(t, "POST", "/api/audit/repair", fullToken, `{"reason":"broker lost messages"}`), &rep)
	if len(rep.Repaired) != 1 || rep.Repaired[0].CopyID != 11 || rep.Repaired[0].MsgID != "m9" {
		t.Fatalf("POST /api/audit/repair: %+v", rep)
	}
	if got := b.au.asked(); !slices.Equal(got, []bool{false, true}) {
		t.Fatalf("runs: %v, want [false true]", got)
	}
	var found bool
	for _, rec := range b.auditRecords(t) {
		what, _ := rec["what"].(map[string]any)
		if rec["route"] == "POST /api/audit/repair" && rec["outcome"] == "ok" && rec["why"] == "broker lost messages" && what["action"] == "repair" {
			found = true
		}
	}
	if !found {
		t.Errorf("no audit record of the repair:\n%s", b.logs)
	}
}

// TestAuditRepairsPages: the repairs page newest first, by the cursor the
// previous page returned.
func TestAuditRepairsPages(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	var ids []int64
	cursor := ""
	for range 5 {
		var page struct {
			Repairs []struct {
				CopyID int64 `json:"copy_id"`
			} `json:"repairs"`
			Next string `json:"next"`
		}
		wantJSON(t, b.do(t, "GET", "/api/audit/repairs?limit=2&cursor="+cursor, readToken, ""), &page)
		for _, r := range page.Repairs {
			ids = append(ids, r.CopyID)
		}
		if cursor = page.Next; cursor == "" {
			break
		}
	}
	if !slices.Equal(ids, []int64{5, 4, 3, 2, 1}) {
		t.Fatalf("repairs %v, want 5 4 3 2 1", ids)
	}
	wantProblem(t, b.do(t, "GET", "/api/audit/repairs?limit=0", readToken, ""), 400, admin.ProblemInvalid, "limit")
}

// TestAuditNotConfigured: without Config.Audit the area answers 404 and the
// index says it is off.
func TestAuditNotConfigured(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *admin.Config) { c.Audit = nil })
	wantProblem(t, b.do(t, "GET", "/api/audit", readToken, ""), 404, admin.ProblemNotConfigured, "audit")
	var idx admin.Index
	wantJSON(t, b.do(t, "GET", "/api/", readToken, ""), &idx)
	if on, ok := idx.Areas["audit"]; !ok || on {
		t.Errorf("index areas %v: want audit listed as off", idx.Areas)
	}
}
