package testsvc

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemhq/idem/internal/pgcluster"
)

// One private cluster per test binary: initdb costs a second or more, a database in
// it costs milliseconds.
var logical struct {
	once    sync.Once
	cluster *pgcluster.Cluster
	err     error
}

// MainWithLogicalPostgres runs m and then stops the private cluster that
// LogicalPostgres may have started. Call it from the TestMain of a package that uses
// LogicalPostgres: os.Exit(testsvc.MainWithLogicalPostgres(m)).
func MainWithLogicalPostgres(m *testing.M) int {
	code := m.Run()
	if logical.cluster != nil {
		if err := logical.cluster.Stop(context.Background()); err != nil {
			fmt.Fprintln(os.Stderr, "testsvc: stopping the private PostgreSQL:", err)
		}
	}
	return code
}

// PostgresServerBinaries skips t (or fails it under IDEM_REQUIRE_SERVICES=1) when
// a private PostgreSQL cluster (package pgcluster) cannot be started here: for tests
// of code that starts its own, such as `idem verify --relay cdc`.
func PostgresServerBinaries(t testing.TB) {
	t.Helper()
	if err := pgcluster.Available(pgcluster.Options{}); err != nil {
		if Required() {
			t.Fatalf("private PostgreSQL: %v", err)
		}
		t.Skipf("private PostgreSQL: %v", err)
	}
}

// LogicalPostgres returns the postgres:// URL of a fresh database, dropped when t
// ends, in a private PostgreSQL cluster with wal_level=logical (package pgcluster),
// started on first use and stopped by MainWithLogicalPostgres. The shared server on
// 5432 is not configured for logical decoding, and changing that needs a restart.
// Without server binaries the test skips, or fails under IDEM_REQUIRE_SERVICES=1.
func LogicalPostgres(t testing.TB) string {
	t.Helper()
	logical.once.Do(func() {
		logical.cluster, logical.err = pgcluster.Start(context.Background(), pgcluster.Options{
			Settings: []string{"shared_preload_libraries = 'pg_stat_statements'"},
		})
	})
	if logical.err != nil {
		if Required() {
			t.Fatalf("private PostgreSQL: %v", logical.err)
		}
		t.Skipf("private PostgreSQL: %v", logical.err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin, err := pgx.Connect(ctx, logical.cluster.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	name := UniqueName("idem_cdc_")
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		admin, err := pgx.Connect(ctx, logical.cluster.URL)
		if err != nil {
			return
		}
		defer admin.Close(ctx)
		// A test's slots hold its database: drop them first (they are inactive by now,
		// or the test leaked a reader, which FORCE then ends).
		_, _ = admin.Exec(ctx, "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE database = $1 AND NOT active", name)
		_, _ = admin.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
	})
	u, _ := url.Parse(logical.cluster.URL)
	u.Path = "/" + name
	return u.String()
}
