package main

import (
	"context"
	"testing"

	"github.com/idemhq/idem/internal/sqltest"
	"github.com/idemhq/idem/migrate"
)

// TestSagasStateEscaped: a saga state holding terminal escapes (a row written by
// hand) reaches the terminal escaped, in the list and in show, as every other
// column does.
func TestSagasStateEscaped(t *testing.T) {
	t.Parallel()
	d := newOpsDB(t, "sqlite")
	if err := migrate.Up(context.Background(), d.db, migrate.Effect, migrate.Saga); err != nil {
		t.Fatal(err)
	}
	sqltest.Saga(t, d.db, "s-escape", "\x1b]0;owned\x07", `{}`, 1)
	for _, args := range [][]string{{"sagas", "list"}, {"sagas", "show", "--id", "s-escape"}} {
		out := mustRun(t, append(args, "--db", d.url)...)
		noRawControls(t, out)
		wantLines(t, out, `\x1b]0;owned\x07`)
	}
}

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
