package idemsqlite_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"

	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/idemsqlite"
)

// A text with no statement in it (a migration of comments only) affects nothing:
// modernc.org/sqlite answers it with a nil Result, on which Exec used to panic.
func TestExecOfOnlyComments(t *testing.T) {
	sdb, err := sql.Open("sqlite", idemsqlite.DSN(filepath.Join(t.TempDir(), "c.db"), idemsqlite.Config{}))
	if err != nil {
		t.Fatal(err)
	}
	defer sdb.Close()
	db := idemsql.SQLDBFor(idemsqlite.Driver(), sdb)
	err = db.Auto(context.Background(), func(q idemsql.Querier) error {
		n, err := q.Exec(context.Background(), "-- nothing to do here\n")
		if n != 0 {
			t.Errorf("affected %d rows", n)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}
