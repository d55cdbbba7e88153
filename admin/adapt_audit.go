package admin

import (
	"context"
	"sync"

	"github.com/idemhq/idem/audit"
)

// AuditFrom returns the Audit area of a: GET /api/audit runs it read-only
// whatever a's Config.Repair, POST /api/audit/repair with repair
// (audit.Auditor.WithRepair), both through a's metrics. Its repairs page by copy
// id, newest first.
//
// One audit runs at a time, whatever the number of callers: a read-only one
// that arrives while another read-only one runs gets that one's report, and any
// other waits for the run ahead of it (or for its own context). A burst of
// requests costs the databases one audit at a time.
func AuditFrom(a *audit.Auditor) Audit { return &auditArea{a: a, turn: make(chan struct{}, 1)} }

type auditArea struct {
	a    *audit.Auditor
	turn chan struct{} // held by the run in progress

	mu      sync.Mutex
	reading *sharedRun // the read-only run in progress, if any
}

// sharedRun is a read-only run that callers arriving meanwhile share.
type sharedRun struct {
	done chan struct{}
	rep  *AuditReport
	err  error
}

func (x *auditArea) Run(ctx context.Context, repair bool) (*AuditReport, error) {
	if repair {
		return x.exclusive(ctx, func(ctx context.Context) (*AuditReport, error) { return x.a.WithRepair(true).Run(ctx) })
	}
	x.mu.Lock()
	if r := x.reading; r != nil {
		x.mu.Unlock()
		select {
		case <-r.done:
			return r.rep, r.err
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	r := &sharedRun{done: make(chan struct{})}
	x.reading = r
	x.mu.Unlock()
	r.rep, r.err = x.exclusive(ctx, func(ctx context.Context) (*AuditReport, error) { return x.a.WithRepair(false).Run(ctx) })
	x.mu.Lock()
	x.reading = nil
	x.mu.Unlock()
	close(r.done)
	return r.rep, r.err
}

// exclusive runs run once no other run is in progress.
func (x *auditArea) exclusive(ctx context.Context, run func(context.Context) (*AuditReport, error)) (*AuditReport, error) {
	select {
	case x.turn <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	defer func() { <-x.turn }()
	return run(ctx)
}

func (x *auditArea) Repairs(ctx context.Context, cursor string, limit int) (AuditRepairPage, error) {
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
