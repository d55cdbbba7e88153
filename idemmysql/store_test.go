package idemmysql_test

import (
	"context"
	"database/sql"
	"errors"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemmysql"
	"github.com/idemhq/idem/idemtest"
	"github.com/idemhq/idem/internal/testsvc"
	"github.com/idemhq/idem/migrate"
)

func ctxFor(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// isolations are the session settings the store is documented to work under, each
// running the whole conformance suite: InnoDB's two usual isolation levels, and a
// connection whose affected-row counts include unchanged rows (clientFoundRows),
// which the store must not mistake for changes.
var isolations = map[string]string{
	"repeatable_read":   "",
	"read_committed":    "tx_isolation=%27READ-COMMITTED%27",
	"client_found_rows": "clientFoundRows=true",
	mysql8Paths:         "",
}

// mysql8Paths runs the suites on MariaDB with its sequence and claim procedure
// dropped, so the store takes the paths it takes on MySQL 8, which has neither:
// tokens from the AUTO_INCREMENT table, claims statement by statement.
const mysql8Paths = "without_sequence_or_procedure"

// newStore opens a store on a fresh database with the session isolation level of
// param ("" for the server's default, REPEATABLE READ).
func newStore(t *testing.T, param string, cfg idemmysql.Config) *idemmysql.Store {
	t.Helper()
	u := testsvc.MySQLDatabase(t)
	if param != "" {
		u += "?" + param
	}
	if strings.HasSuffix(t.Name(), mysql8Paths) || strings.Contains(t.Name(), mysql8Paths+"/") {
		migrated, err := idemmysql.Open(ctxFor(t), u, cfg)
		if err != nil {
			t.Fatal(err)
		}
		_, err = migrated.DB().ExecContext(ctxFor(t), "DROP PROCEDURE idem_records_claim")
		if err == nil {
			_, err = migrated.DB().ExecContext(ctxFor(t), "DROP PROCEDURE idem_records_claim_group")
		}
		if err == nil {
			_, err = migrated.DB().ExecContext(ctxFor(t), "DROP SEQUENCE idem_records_token_seq")
		}
		migrated.Close()
		if err != nil {
			t.Fatal(err)
		}
	}
	s, err := idemmysql.Open(ctxFor(t), u, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if strings.HasPrefix(param, "tx_isolation") {
		var level string
		if err := s.DB().QueryRowContext(ctxFor(t), "SELECT @@tx_isolation").Scan(&level); err != nil || level != "READ-COMMITTED" {
			t.Fatalf("session isolation = %q, %v; want READ-COMMITTED", level, err)
		}
	}
	return s
}

func TestStoreConformance(t *testing.T) {
	t.Parallel()
	for name, param := range isolations {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			idemtest.StoreSuite(t, idemtest.Harness{
				New:         func(t *testing.T) idem.Store { return newStore(t, param, idemmysql.Config{}) },
				Unreachable: unreachable,
			})
		})
	}
}

func TestTxStoreConformance(t *testing.T) {
	t.Parallel()
	for name, param := range isolations {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			idemtest.TxStoreSuite(t, func(t *testing.T) idemtest.TxEnv[*sql.Tx] {
				s := newStore(t, param, idemmysql.Config{})
				return idemtest.SQLTxEnv(t, s.DB(), s)
			})
		})
	}
}

func unreachable(t *testing.T) idem.Store {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	s, err := idemmysql.Open(ctxFor(t), "mysql://root@"+addr+"/test", idemmysql.Offline(idemmysql.Config{}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// A custom table, and the schema check of SkipMigrate.
func TestTableAndSkipMigrate(t *testing.T) {
	t.Parallel()
	ctx := ctxFor(t)
	u := testsvc.MySQLDatabase(t)
	_, err := idemmysql.Open(ctx, u, idemmysql.Config{Table: "order_keys", SkipMigrate: true})
	if !errors.Is(err, migrate.ErrBehind) || !strings.Contains(err.Error(), "001_records") {
		t.Fatalf("SkipMigrate on an empty database = %v, want ErrBehind naming 001_records", err)
	}
	s, err := idemmysql.Open(ctx, u, idemmysql.Config{Table: "order_keys"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	r, err := s.Claim(ctx, idem.Claim{Key: idem.Key{Scope: "s", ID: "k"}})
	if err != nil || r.Outcome != idem.Acquired {
		t.Fatalf("Claim = %+v, %v", r, err)
	}
	var n int
	if err := s.DB().QueryRowContext(ctx, "SELECT COUNT(*) FROM order_keys").Scan(&n); err != nil || n != 1 {
		t.Fatalf("order_keys has %d rows (%v), want the claim's", n, err)
	}
	if _, err := idemmysql.Open(ctx, u, idemmysql.Config{Table: "order_keys", SkipMigrate: true}); err != nil {
		t.Fatalf("SkipMigrate after the migration: %v", err)
	}
	var ie *idem.InputError
	if _, err := s.DB().ExecContext(ctx, "CREATE TABLE not_ours (scope VARBINARY(255), id VARBINARY(255))"); err != nil {
		t.Fatal(err)
	}
	if _, err := idemmysql.Open(ctx, u, idemmysql.Config{Table: "not_ours"}); !errors.As(err, &ie) || ie.Field != "idemmysql.Config.Table" {
		t.Errorf("Open on a table of another shape = %v, want an InputError on Config.Table", err)
	}
	if _, err := idemmysql.Open(ctx, u+"?sql_mode=%27%27", idemmysql.Config{}); !errors.As(err, &ie) || ie.Field != "sql_mode" {
		t.Errorf("Open with a non-strict sql_mode = %v, want an InputError on sql_mode", err)
	}
	for _, bad := range []idemmysql.Config{{Table: "Orders"}, {Table: "x`; DROP TABLE y"}, {SweepBatch: -1}} {
		var ie *idem.InputError
		if _, err := idemmysql.Open(ctx, u, bad); !errors.As(err, &ie) || !strings.HasPrefix(ie.Field, "idemmysql.Config.") {
			t.Errorf("Open(%+v) = %v, want an InputError on the field", bad, err)
		}
	}
}

// Sweep deletes expired records and old token rows, and tokens keep rising after it.
func TestSweepKeepsTokensRising(t *testing.T) {
	t.Parallel()
	ctx := ctxFor(t)
	s := newStore(t, "", idemmysql.Config{SweepBatch: 2})
	var last uint64
	for i := range 5 {
		r, err := s.Claim(ctx, idem.Claim{Key: idem.Key{Scope: "s", ID: "k"}, Lease: time.Millisecond})
		if err != nil || r.Outcome != idem.Acquired || r.Token <= last {
			t.Fatalf("claim %d = %+v, %v; want acquired with a token above %d", i, r, err, last)
		}
		last = r.Token
		time.Sleep(3 * time.Millisecond) // the lease must pass on the server's clock
		if _, err := s.Sweep(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// MariaDB draws from the sequence and leaves the table empty; MySQL keeps the
	// newest row, so its AUTO_INCREMENT counter cannot fall back.
	var mariadb bool
	if err := s.DB().QueryRowContext(ctx, "SELECT VERSION() LIKE '%MariaDB%'").Scan(&mariadb); err != nil {
		t.Fatal(err)
	}
	want := 1
	if mariadb {
		want = 0
	}
	var tokens int
	if err := s.DB().QueryRowContext(ctx, "SELECT COUNT(*) FROM idem_records_tokens").Scan(&tokens); err != nil || tokens != want {
		t.Fatalf("token rows after sweeping = %d (%v), want %d", tokens, err, want)
	}
}

// A URL pointing at a server that is not MySQL fails with an error that says so,
// and a peer that never answers does not hold Open past its context.
func TestOpenNotMySQL(t *testing.T) {
	t.Parallel()
	pg, _ := url.Parse(testsvc.PostgresURL())
	testsvc.Reach(t, "postgres", pg.Host)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := idemmysql.Open(ctx, "mysql://root@"+pg.Host+"/test", idemmysql.Config{})
	var be *idem.BackendError
	if !errors.As(err, &be) || !strings.Contains(err.Error(), "no MySQL or MariaDB server answered") {
		t.Fatalf("Open on a PostgreSQL port = %v, want a BackendError saying no MySQL server answered", err)
	}
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	go func() {
		for {
			c, err := silent.Accept()
			if err != nil {
				return
			}
			defer c.Close() // accepted, never answered
		}
	}()
	short, cancel2 := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel2()
	if _, err := idemmysql.Open(short, "mysql://root@"+silent.Addr().String()+"/test", idemmysql.Config{}); err == nil {
		t.Fatal("Open on a silent peer succeeded")
	}
}

func TestDSN(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"mysql://root@127.0.0.1:3306/test":                     "root@tcp(127.0.0.1:3306)/test?interpolateParams=true&timeout=10s",
		"mysql://app:p%40ss@db/shop?timeout=2s&tls=true":       "app:p@ss@tcp(db:3306)/shop?interpolateParams=true&timeout=2s&tls=true",
		"mysql://root@h/db?interpolateParams=false&timeout=1s": "root@tcp(h:3306)/db?timeout=1s",
	} {
		got, err := idemmysql.DSN(in)
		if err != nil || got != want {
			t.Errorf("DSN(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "postgres://x@h/db", "mysql://root@h:3306/", "mysql://root:secret@h/db?timeout=never"} {
		_, err := idemmysql.DSN(bad)
		if !errors.Is(err, idem.ErrInvalid) || strings.Contains(err.Error(), "secret") {
			t.Errorf("DSN(%q) = %v, want an InputError that does not print the password", bad, err)
		}
	}
}
