package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"flag"
	"path/filepath"
	"strings"
	"testing"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/cmd/idem/internal/cli"
	"github.com/idemhq/idem/cmd/idem/internal/operator"
	"github.com/idemhq/idem/idemmysql"
	"github.com/idemhq/idem/idempg"
	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/idemsqlite"
	"github.com/idemhq/idem/internal/testsvc"
)

// runCode runs `idem args…` and returns its output and the exit code main would
// give it.
func runCode(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	stdout, stderr, err := run(t, args...)
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return stdout, stderr, 0
	case errors.Is(err, cli.ErrUsage):
		return stdout, stderr, 2
	}
	return stdout, stderr + err.Error(), operator.ExitCode(err)
}

// mustRun runs `idem args…` and fails t unless it exits 0.
func mustRun(t *testing.T, args ...string) string {
	t.Helper()
	out, stderr, code := runCode(t, args...)
	if code != 0 {
		t.Fatalf("idem %s exited %d:\n%s%s", strings.Join(args, " "), code, out, stderr)
	}
	return out
}

// wantCode runs `idem args…` and fails t unless it exits code with stderr or the
// error saying want.
func wantCode(t *testing.T, code int, want string, args ...string) string {
	t.Helper()
	out, stderr, got := runCode(t, args...)
	if got != code || !strings.Contains(stderr, want) {
		t.Fatalf("idem %s exited %d (stderr %q), want %d saying %q", strings.Join(args, " "), got, stderr, code, want)
	}
	return out
}

// decode parses one JSON document of --json output into v.
func decode(t *testing.T, out string, v any) {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(out))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		t.Fatalf("--json output %q: %v", out, err)
	}
	if dec.More() {
		t.Fatalf("--json printed more than one document: %q", out)
	}
}

// noRawControls fails t if out holds a control character other than newline: stored
// bytes reached the terminal unescaped.
func noRawControls(t *testing.T, out string) {
	t.Helper()
	for _, r := range out {
		if r != '\n' && (r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0)) {
			t.Fatalf("output holds a raw control character %U:\n%q", r, out)
		}
	}
}

// wantLines fails t unless out holds each of want.
func wantLines(t *testing.T, out string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(out, w) {
			t.Errorf("output does not hold %q:\n%s", w, out)
		}
	}
}

// opsDB is a database for the operator commands: its --db URL and a handle on it.
type opsDB struct {
	name  string
	url   string
	db    idemsql.TxDB[*sql.Tx]
	store idem.TxStore[*sql.Tx] // the records store of the same database
}

// forEachOpsDB runs fn on SQLite, PostgreSQL and, with mysql, MySQL/MariaDB, as
// parallel subtests, each on a database of its own.
func forEachOpsDB(t *testing.T, mysql bool, fn func(t *testing.T, d opsDB)) {
	names := []string{"sqlite", "postgres"}
	if mysql {
		names = append(names, "mysql")
	}
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			fn(t, newOpsDB(t, name))
		})
	}
}

func newOpsDB(t *testing.T, name string) opsDB {
	t.Helper()
	ctx := context.Background()
	var raw string
	var db *sql.DB
	var store idem.TxStore[*sql.Tx]
	var err error
	switch name {
	case "sqlite":
		path := filepath.Join(t.TempDir(), "app.db")
		s, err := idemsqlite.Open(ctx, path, idemsqlite.Config{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		raw, db, store = "sqlite:"+path, s.DB(), s
	case "postgres":
		raw, _ = testsvc.PostgresSchema(t)
		if db, err = sql.Open("pgx", raw); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		store, err = idempg.NewSQL(ctx, db, idempg.Config{})
	case "mysql":
		raw = testsvc.MySQLDatabase(t)
		db = testsvc.OpenMySQL(t, raw)
		store, err = idemmysql.New(ctx, db, idemmysql.Config{})
	}
	if err != nil {
		t.Fatal(err)
	}
	txdb, err := idemsql.SQLDB(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	return opsDB{name, raw, txdb, store}
}

func TestHelpListsOpsCommands(t *testing.T) {
	t.Parallel()
	_, stderr, _ := run(t, "--help")
	for _, c := range []string{"keys", "dlq", "outbox", "sagas"} {
		if !strings.Contains(stderr, "\n  "+c+" ") {
			t.Errorf("--help does not list %q:\n%s", c, stderr)
		}
	}
}

func TestOpsBadCommandLines(t *testing.T) {
	t.Parallel()
	db := "sqlite:" + filepath.Join(t.TempDir(), "none.db")
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"keys"}, 2, "name an action"},
		{[]string{"keys", "drop"}, 2, `unknown action "drop"`},
		{[]string{"keys", "list", "--scope", "s"}, 2, "--store is required"},
		{[]string{"keys", "list", "--store", "memory:", "--scope", "s"}, 2, "lives inside the serve process"},
		{[]string{"keys", "list", "--store", "sqlite:/nonexistent/gw.db", "--scope", "s"}, 1, "name the file serve uses"},
		{[]string{"keys", "list", "--store", "mongodb://u:Secr3t@h/db", "--scope", "s"}, 2, "unknown store"},
		{[]string{"keys", "get", "--store", "sqlite:x.db", "--scope", "s"}, 2, "--id is required"},
		{[]string{"keys", "list", "--store", "sqlite:x.db", "--scope", "s", "--limit", "0"}, 2, "--limit 0"},
		{[]string{"keys", "evict", "--store", "sqlite:x.db", "--scope", "s", "--id", "k"}, 2, "--reason is required"},
		{[]string{"dlq", "list"}, 2, "--db is required"},
		{[]string{"dlq", "list", "--db", db}, 1, "name the file your service uses"},
		{[]string{"dlq", "list", "--db", "postgres://u:Secr3t@127.0.0.1:1/db", "--since", "yesterday"}, 2, "--since"},
		{[]string{"dlq", "show", "--db", db}, 2, "--id is required"},
		{[]string{"dlq", "show", "--db", db, "--id", "-4"}, 2, "not an id"},
		{[]string{"dlq", "replay", "--db", db}, 2, "--id is required"},
		{[]string{"dlq", "discard", "--db", db, "--id", "3"}, 2, "--reason is required"},
		{[]string{"outbox", "retry", "--db", db}, 2, "--id is required"},
		{[]string{"outbox", "discard", "--db", db, "--id", "1", "--reason", " "}, 2, "--reason is required"},
		{[]string{"outbox", "parked", "--db", db, "--limit", "5000"}, 2, "--limit 5000"},
		{[]string{"sagas", "retry", "--db", db, "--id", "o-1"}, 2, "--reason is required"},
		{[]string{"sagas", "resolve", "--db", db, "--id", "o-1"}, 2, "--note is required"},
		{[]string{"sagas", "show", "--db", db}, 2, "--id is required"},
		{[]string{"sagas", "list", "--db", "mysql://root:Secr3t@127.0.0.1:1/x", "--limit", "0"}, 2, "--limit 0"},
	} {
		_, stderr, code := runCode(t, tc.args...)
		if code != tc.code || !strings.Contains(stderr, tc.want) || strings.Contains(stderr, "Secr3t") {
			t.Errorf("idem %s exited %d (stderr %q), want %d saying %q without the password", strings.Join(tc.args, " "), code, stderr, tc.code, tc.want)
		}
	}
	if _, stderr, code := runCode(t, "dlq", "--help"); code != 0 || !strings.Contains(stderr, "3 not found, 4 conflict") {
		t.Errorf("dlq --help exited %d and does not document the exit codes:\n%s", code, stderr)
	}
}

// An unreachable database is a failure (1), and its password is not printed.
func TestOpsUnreachableDatabaseIsRedacted(t *testing.T) {
	t.Parallel()
	addr := testsvc.ClosedAddr(t)
	_, stderr, code := runCode(t, "outbox", "status", "--db", "postgres://root:Secr3t@"+addr+"/test?connect_timeout=2")
	if code != 1 || strings.Contains(stderr, "Secr3t") || stderr == "" {
		t.Fatalf("outbox status on a closed port exited %d, stderr %q: want 1, without the password", code, stderr)
	}
}
