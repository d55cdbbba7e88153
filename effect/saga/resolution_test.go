package saga

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/internal/sqltest"
)

// Resolved sagas whose resolution another service wrote by hand (on SQLite, with
// text in resolved_at) or left out are shown: the detail of each says what of it
// cannot be decoded, instead of failing (or, without a resolution, answering that
// the saga does not exist).
func TestAdminReadsBadResolutions(t *testing.T) {
	t.Parallel()
	forEachDB(t, func(t *testing.T, e env) {
		ctx := context.Background()
		e.orchestrator(t, newServices(t), nil) // its tables
		sqltest.Saga(t, e.db, "resolved-ok", Resolved, `{}`, 0)
		sqltest.Resolution(t, e.db, "resolved-ok", Failed, time.Now().UnixNano())
		sqltest.Saga(t, e.db, "resolved-none", Resolved, `{}`, 0)
		a, err := NewAdmin(ctx, e.db)
		if err != nil {
			t.Fatal(err)
		}
		if d, err := a.Get(ctx, "resolved-ok"); err != nil || d.Resolution == nil || d.Resolution.PreviousState != Failed || d.DecodeError != "" {
			t.Errorf("Get(resolved-ok) = %+v, %v", d, err)
		}
		if d, err := a.Get(ctx, "resolved-none"); err != nil || d.State != Resolved || d.Resolution != nil {
			t.Errorf("Get(resolved-none) = %+v, %v; want it resolved, without its missing resolution", d, err)
		}
		if e.db.Dialect() != idemsql.SQLite {
			return
		}
		sqltest.Saga(t, e.db, "resolved-typed", Resolved, `{}`, 0)
		sqltest.Resolution(t, e.db, "resolved-typed", Failed, "yesterday")
		d, err := a.Get(ctx, "resolved-typed")
		if err != nil || d.Resolution == nil || d.Resolution.Note != "written by hand" || !d.Resolution.At.Equal(time.Unix(0, 0)) ||
			!strings.HasPrefix(d.DecodeError, "resolution.resolved_at: ") {
			t.Errorf("Get(resolved-typed) = %+v, %v; want its resolution, and a decode error naming resolved_at", d, err)
		}
	})
}
