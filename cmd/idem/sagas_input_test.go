package main

import (
	"context"
	"testing"

	"github.com/idemhq/idem/migrate"
)

// TestSagasBadCursor: a cursor no listing made is bad input (exit 2) on every
// database, not a failure of the database (exit 1): "AA" decodes to a NUL byte,
// which PostgreSQL refuses in a text value.
func TestSagasBadCursor(t *testing.T) {
	t.Parallel()
	forEachOpsDB(t, true, func(t *testing.T, d opsDB) {
		if err := migrate.Up(context.Background(), d.db, migrate.Effect, migrate.Saga); err != nil {
			t.Fatal(err)
		}
		for _, c := range []string{"AA", "_w", "not a cursor"} {
			wantCode(t, 2, "cursor", "sagas", "list", "--db", d.url, "--cursor", c)
		}
	})
}
