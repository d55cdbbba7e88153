package admin

import (
	"context"

	"github.com/idemhq/idem/audit"
)

// AuditFrom returns the Audit area of a: GET /api/audit runs it read-only
// whatever a's Config.Repair, POST /api/audit/repair with repair
// (audit.Auditor.WithRepair), both through a's metrics. Its repairs page by copy
// id, newest first.
func AuditFrom(a *audit.Auditor) Audit { return auditArea{a} }

type auditArea struct{ a *audit.Auditor }

func (x auditArea) Run(ctx context.Context, repair bool) (*AuditReport, error) {
	return x.a.WithRepair(repair).Run(ctx)
}

func (x auditArea) Repairs(ctx context.Context, cursor string, limit int) (AuditRepairPage, error) {
	before, err := decodeIDCursor(cursor)
	if err != nil {
		return AuditRepairPage{}, err
	}
	if limit <= 0 {
		limit = DefaultLimit
	}
	list, err := x.a.Repairs(ctx, before, limit)
	if err != nil {
		return AuditRepairPage{}, err
	}
	var page AuditRepairPage
	page.Repairs, page.Next = idPage(list, limit, func(r audit.Repair) int64 { return r.CopyID }, func(r audit.Repair) AuditRepair { return r })
	return page, nil
}
