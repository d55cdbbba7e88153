package idempg_test

import (
	"context"
	"database/sql"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/idemhq/idem/idempg"
	"github.com/idemhq/idem/internal/testsvc"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" database/sql driver
)

// TestMain skips the whole package when Postgres is down, as testsvc.Reach does for
// one test: the runnable examples need the database and cannot skip themselves.
// Under IDEM_REQUIRE_SERVICES=1 everything runs and fails instead.
func TestMain(m *testing.M) {
	if u, err := url.Parse(testsvc.PostgresURL()); err == nil && !testsvc.Required() {
		c, err := net.DialTimeout("tcp", u.Host, 3*time.Second)
		if err != nil {
			fmt.Printf("idempg: skipping all tests: postgres not reachable at %s (%v); start it with `make services`\n", u.Host, err)
			os.Exit(0)
		}
		c.Close()
	}
	os.Exit(m.Run())
}

func ctxFor(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// newStore returns a migrated Store on a pool in a fresh schema.
func newStore(t testing.TB, cfg idempg.Config) (*idempg.Store, *pgxpool.Pool) {
	t.Helper()
	pool := testsvc.PostgresPool(t)
	s, err := idempg.New(ctxFor(t), pool, cfg)
	if err != nil {
		t.Fatalf("idempg.New: %v", err)
	}
	return s, pool
}

// execAll runs statements on pool, one after another.
func execAll(t testing.TB, ctx context.Context, pool *pgxpool.Pool, statements ...string) {
	t.Helper()
	for _, q := range statements {
		if _, err := pool.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
}

// queryPlan returns what query (an EXPLAIN) prints, its lines joined.
func queryPlan(t testing.TB, ctx context.Context, pool *pgxpool.Pool, query string, args ...any) string {
	t.Helper()
	rows, _ := pool.Query(ctx, query, args...) // CollectRows reports its error
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return strings.Join(lines, "\n")
}

// openDB opens database/sql on a fresh schema through pgx's stdlib driver.
func openDB(t testing.TB) *sql.DB {
	t.Helper()
	cs, _ := testsvc.PostgresSchema(t)
	db, err := sql.Open("pgx", cs)
	if err != nil {
		t.Fatalf("sql.Open: %v", err)
	}
	// database/sql opens a connection per concurrent call; the suite races 64.
	db.SetMaxOpenConns(8)
	t.Cleanup(func() { db.Close() })
	return db
}

// newSQLStore returns a migrated SQLStore on a fresh schema.
func newSQLStore(t testing.TB, cfg idempg.Config) (*idempg.SQLStore, *sql.DB) {
	t.Helper()
	db := openDB(t)
	s, err := idempg.NewSQL(ctxFor(t), db, cfg)
	if err != nil {
		t.Fatalf("idempg.NewSQL: %v", err)
	}
	return s, db
}

// closedURL points at a port nothing listens on.
func closedURL(t testing.TB) string {
	return "postgres://postgres@" + testsvc.ClosedAddr(t) + "/test?sslmode=disable&connect_timeout=5"
}

func unreachablePool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), closedURL(t))
	if err != nil {
		t.Fatalf("pgxpool: %v", err)
	}
	t.Cleanup(pool.Close)
	return pool
}

func unreachableDB(t testing.TB) *sql.DB {
	t.Helper()
	db, err := sql.Open("pgx", closedURL(t))
	if err != nil {
		t.Fatalf("sql.Open: %v", err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}
