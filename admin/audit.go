package admin

import (
	"context"
	"net/http"

	"github.com/idemhq/idem/audit"
)

// Audit is the end-to-end audit's area (package audit): what the outbox
// published against what each consumer applied or dead-lettered, and the
// republishing of what is missing.
type Audit interface {
	// Run audits the window once; with repair, it republishes what is missing
	// (audit.Config.Repair).
	Run(ctx context.Context, repair bool) (*AuditReport, error)
	// Repairs returns up to limit recorded repairs, newest first, after cursor.
	Repairs(ctx context.Context, cursor string, limit int) (AuditRepairPage, error)
}

// AuditReport is one audit run's report, as package audit makes it.
type AuditReport = audit.Report

// AuditRepair is one republished message.
type AuditRepair = audit.Repair

// AuditRepairPage is a page of Audit.Repairs.
type AuditRepairPage struct {
	Repairs []AuditRepair `json:"repairs"`
	Next    string        `json:"next"` // "" after the last page
}

func serveAudit(h *handler, r *http.Request, c *call) (any, error) {
	return auditReport(h.cfg.Audit.Run(r.Context(), false))
}

func serveAuditRepair(h *handler, r *http.Request, c *call) (any, error) {
	var req struct {
		Reason string `json:"reason"`
	}
	if err := decode(r, &req); err != nil {
		return nil, err
	}
	if err := reason(c, "reason", req.Reason); err != nil {
		return nil, err
	}
	c.target = []any{"area", areaAudit, "action", "repair"}
	return auditReport(h.cfg.Audit.Run(r.Context(), true))
}

// auditReport answers a run: its report, with empty lists written [].
func auditReport(shared *AuditReport, err error) (any, error) {
	if err != nil {
		return nil, err
	}
	rep := *shared // shared with the other callers of one run (AuditFrom)
	if rep.Rows == nil {
		rep.Rows = []audit.Row{}
	}
	if rep.Blind == nil {
		rep.Blind = []audit.Blind{}
	}
	if rep.Repaired == nil {
		rep.Repaired = []audit.Repair{}
	}
	return &rep, nil
}

func serveAuditRepairs(h *handler, r *http.Request, c *call) (any, error) {
	q, err := parseQuery(r)
	if err != nil {
		return nil, err
	}
	cursor, limit, err := q.page()
	if err != nil {
		return nil, err
	}
	page, err := h.cfg.Audit.Repairs(r.Context(), cursor, limit)
	if err != nil {
		return nil, err
	}
	if page.Repairs == nil {
		page.Repairs = []AuditRepair{}
	}
	return page, nil
}
