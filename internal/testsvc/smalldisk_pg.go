package testsvc

import (
	"context"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemhq/idem/internal/pgcluster"
)

// PostgresOnSmallDisk starts a private PostgreSQL cluster (package pgcluster) for t
// whose database "small" keeps its tables and indexes in a tablespace on disk, a
// SmallDisk of its own, and returns the postgres:// URL of that database. Filling
// disk makes a write that needs a new page fail with SQLSTATE 53100 ("could not
// extend file …: No space left on device"), an ERROR the server survives. The
// server's WAL stays on the ordinary disk: a full pg_wal is a PANIC, a crash and
// not a full-disk error (see docs/operating.md). Without server binaries or mount
// rights the test skips, or fails under IDEM_REQUIRE_SERVICES=1.
func PostgresOnSmallDisk(t testing.TB, disk *SmallDisk) string {
	t.Helper()
	PostgresServerBinaries(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ts := filepath.Join(disk.Dir, "tablespace")
	if err := os.Mkdir(ts, 0o700); err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() == 0 { // the server runs as the postgres OS user (see pgcluster)
		u, err := user.Lookup("postgres")
		if err != nil {
			t.Fatal(err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(ts, uid, gid); err != nil {
			t.Fatal(err)
		}
	}
	c, err := pgcluster.Start(ctx, pgcluster.Options{})
	if err != nil {
		t.Fatalf("private PostgreSQL: %v", err)
	}
	t.Cleanup(func() {
		if err := c.Stop(context.Background()); err != nil {
			t.Errorf("stopping the private PostgreSQL: %v", err)
		}
	})
	admin, err := pgx.Connect(ctx, c.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	for _, stmt := range []string{
		"CREATE TABLESPACE small LOCATION '" + ts + "'",
		"CREATE DATABASE small",
		"ALTER DATABASE small SET default_tablespace = small",
	} {
		if _, err := admin.Exec(ctx, stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	return "postgres://postgres@127.0.0.1:" + strconv.Itoa(c.Port) + "/small?sslmode=disable"
}
