// Package testsvc finds the services idem's tests run against and gives each test an
// isolated piece of them (a Postgres schema, a Redis key prefix).
//
// A test that cannot reach its service is skipped, unless IDEM_REQUIRE_SERVICES=1
// (set by `make test` and CI), in which case it fails: CI never passes by skipping.
package testsvc

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx"

	"github.com/idemhq/idem/chaos"
	"github.com/idemhq/idem/idemmysql"
)

// Env names the variables that point tests at services.
const (
	EnvRequire  = "IDEM_REQUIRE_SERVICES"
	EnvPostgres = "IDEM_TEST_POSTGRES_URL" // default postgres://postgres@127.0.0.1:5432/test?sslmode=disable
	EnvRedis    = "IDEM_TEST_REDIS_ADDR"   // default 127.0.0.1:6379
	EnvMySQL    = "IDEM_TEST_MYSQL_URL"    // default mysql://root@127.0.0.1:3306/test
)

// MySQLURL is the MySQL or MariaDB server the tests use.
func MySQLURL() string { return envOr(EnvMySQL, "mysql://root@127.0.0.1:3306/test") }

// MySQLDatabase creates a fresh database for t, dropped when t ends, and returns the
// mysql:// URL of it.
func MySQLDatabase(t testing.TB) string {
	t.Helper()
	base := MySQLURL()
	u, err := url.Parse(base)
	if err != nil {
		t.Fatalf("%s=%q: %v", EnvMySQL, base, err)
	}
	Reach(t, "mysql", u.Host)
	dsn, err := idemmysql.DSN(base)
	if err != nil {
		t.Fatalf("%s: %v", EnvMySQL, err)
	}
	admin, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	name := UniqueName("idem_test_")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := admin.ExecContext(ctx, "CREATE DATABASE "+name); err != nil {
		admin.Close()
		t.Fatalf("create database: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, _ = admin.ExecContext(ctx, "DROP DATABASE IF EXISTS "+name)
		admin.Close()
	})
	u.Path = "/" + name
	return u.String()
}

// MySQLDB opens a handle on a fresh database (see MySQLDatabase), closed when t ends.
func MySQLDB(t testing.TB) *sql.DB {
	t.Helper()
	return OpenMySQL(t, MySQLDatabase(t))
}

// OpenMySQL opens a handle on the database of a mysql:// URL, closed when t ends.
func OpenMySQL(t testing.TB, rawURL string) *sql.DB {
	t.Helper()
	dsn, err := idemmysql.DSN(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// PostgresURL is the Postgres the tests use.
func PostgresURL() string {
	return envOr(EnvPostgres, "postgres://postgres@127.0.0.1:5432/test?sslmode=disable")
}

// RedisAddr is the Redis the tests use.
func RedisAddr() string { return envOr(EnvRedis, "127.0.0.1:6379") }

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// Required reports whether tests must fail rather than skip when a service is down.
func Required() bool { return os.Getenv(EnvRequire) == "1" }

// Reach dials addr and skips (or, with IDEM_REQUIRE_SERVICES=1, fails) the test if the
// service is not there.
func Reach(t testing.TB, service, addr string) {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 3*time.Second)
	if err == nil {
		conn.Close()
		return
	}
	msg := fmt.Sprintf("%s not reachable at %s (%v); start it with `make services`", service, addr, err)
	if Required() {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

// ReachURL is Reach for the host of a service's URL (nats://host:4222,
// postgres://user@host:5432/db).
func ReachURL(t testing.TB, service, rawURL string) {
	t.Helper()
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatalf("%s URL: %v", service, err)
	}
	Reach(t, service, u.Host)
}

// UniqueName returns prefix followed by 12 random hex characters: a name no other
// test (or run) uses.
func UniqueName(prefix string) string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

// PostgresSchema creates a fresh schema for t, dropped when t ends, and returns a
// connection string whose search_path is that schema, so unqualified table names land
// there. Isolated tests can then run in parallel on one database.
func PostgresSchema(t testing.TB) (connString, schema string) {
	t.Helper()
	u := postgresBase(t)
	schema = UniqueName("idem_test_")
	postgresScratch(t, "CREATE SCHEMA "+schema, "DROP SCHEMA "+schema+" CASCADE")
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String(), schema
}

// PostgresDatabase creates a fresh database for t, dropped when t ends, and returns
// its URL: for what a schema does not isolate, such as LISTEN/NOTIFY channels, which
// are per database.
func PostgresDatabase(t testing.TB) string {
	t.Helper()
	u := postgresBase(t)
	name := UniqueName("idem_test_")
	postgresScratch(t, "CREATE DATABASE "+name, "DROP DATABASE "+name+" WITH (FORCE)")
	u.Path = "/" + name
	return u.String()
}

// postgresBase is the parsed PostgresURL, once the server is reachable.
func postgresBase(t testing.TB) *url.URL {
	t.Helper()
	base := PostgresURL()
	u, err := url.Parse(base)
	if err != nil {
		t.Fatalf("%s=%q: %v", EnvPostgres, base, err)
	}
	Reach(t, "postgres", u.Host)
	return u
}

// postgresScratch runs create on the test server now and drop when t ends, each on
// a connection of its own.
func postgresScratch(t testing.TB, create, drop string) {
	t.Helper()
	base := PostgresURL()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Fatalf("connect to postgres: %v", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, create); err != nil {
		t.Fatalf("%s: %v", create, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		if conn, err := pgx.Connect(ctx, base); err == nil {
			_, _ = conn.Exec(ctx, drop)
			conn.Close(ctx)
		}
	})
}

// PostgresDB opens a database/sql handle (driver "pgx") on a fresh schema (see
// PostgresSchema), closed when t ends.
func PostgresDB(t testing.TB) *sql.DB {
	t.Helper()
	cs, _ := PostgresSchema(t)
	db, err := sql.Open("pgx", cs)
	if err != nil {
		t.Fatalf("sql.Open pgx: %v", err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// PostgresPool opens a pool on a fresh schema (see PostgresSchema), closed when t ends.
func PostgresPool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	cs, _ := PostgresSchema(t)
	pool, err := pgxpool.New(context.Background(), cs)
	if err != nil {
		t.Fatalf("pgxpool: %v", err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// RedisPrefix returns a key prefix unique to t, ending in ':'.
func RedisPrefix(t testing.TB) string {
	t.Helper()
	Reach(t, "redis", RedisAddr())
	name := strings.NewReplacer("/", "_", " ", "_").Replace(t.Name())
	if len(name) > 40 {
		name = name[len(name)-40:]
	}
	return UniqueName("idemtest:"+name+":") + ":"
}

// ClosedAddr returns a loopback address on which nothing listens.
func ClosedAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// PostgresProxy starts a chaos.Proxy to the server of the Postgres URL cs,
// closed when t ends, and returns it with cs rewritten to go through it: a
// database whose connections a test cuts.
func PostgresProxy(t testing.TB, cs string) (*chaos.Proxy, string) {
	t.Helper()
	u, err := url.Parse(cs)
	if err != nil {
		t.Fatal(err)
	}
	proxy, err := chaos.NewProxy("postgres", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(proxy.Close)
	u.Host = proxy.Addr()
	return proxy, u.String()
}
