package admin_test

import (
	"context"
	"strings"
	"testing"

	"github.com/idemhq/idem/admin"
	"github.com/idemhq/idem/migrate"
)

// TestBadCursorIsBadInput: a cursor no listing made is the caller's 400 naming the
// cursor on every database, never the backend's 503 with an ERROR in the log ("AA"
// decodes to a NUL byte, "_w" to invalid UTF-8: PostgreSQL refuses both in text).
func TestBadCursorIsBadInput(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		if err := migrate.Up(ctx, b.db, migrate.Effect, migrate.Saga); err != nil {
			t.Fatal(err)
		}
		a, logs := sqlAPI(t, b)
		for _, target := range []string{"/api/sagas?cursor=AA", "/api/sagas?state=failed&cursor=_w",
			"/api/effects?state=failed&cursor=AA.AA", "/api/effects?cursor=failed:_w._w"} {
			wantProblem(t, a.do("GET", target, ""), 400, admin.ProblemInvalid, "cursor")
		}
		if strings.Contains(logs.String(), "ERROR") {
			t.Errorf("a bad cursor logged an error:\n%s", logs)
		}
	})
}
