package main

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/internal/testsvc"
	"github.com/idemhq/idem/migrate"
	"github.com/idemhq/idem/outbox"
)

// up, status, down and up again on a new SQLite file, through the command line.
func TestMigrateUpStatusDown(t *testing.T) {
	t.Parallel()
	db := "sqlite:" + filepath.Join(t.TempDir(), "app.db")
	out, _, err := run(t, "migrate", "up", "--db", db)
	if err != nil || !strings.Contains(out, "applied outbox (idem_outbox)") || !strings.Contains(out, "001_records") {
		t.Fatalf("migrate up = %v:\n%s", err, out)
	}
	if out, _, err = run(t, "migrate", "up", "--db", db); err != nil || !strings.Contains(out, "up to date") {
		t.Fatalf("second migrate up = %v:\n%s", err, out)
	}
	out, _, err = run(t, "migrate", "status", "--db", db)
	if err != nil || strings.Contains(out, "001_") || !strings.Contains(out, "idem_dead_letters") {
		t.Fatalf("status after up should list every component with nothing pending (%v):\n%s", err, out)
	}
	if out, _, err = run(t, "migrate", "down", "--db", db, "--component", "outbox"); err != nil || !strings.Contains(out, "rolled back outbox") {
		t.Fatalf("migrate down --component outbox = %v:\n%s", err, out)
	}
	out, _, _ = run(t, "migrate", "status", "--db", db, "--component", "outbox,records")
	if !strings.Contains(out, "004_audit") || strings.Contains(out, "001_records") {
		t.Fatalf("status after rolling back the outbox:\n%s", out)
	}
}

// The printed script, applied by another tool, satisfies a constructor that only
// checks (SkipMigrate); before it, that constructor names the missing migration.
func TestMigratePrintIsWhatSkipMigrateChecks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cs, _ := testsvc.PostgresSchema(t)
	sdb, err := sql.Open("pgx", cs)
	if err != nil {
		t.Fatal(err)
	}
	defer sdb.Close()
	db, err := idemsql.SQLDB(ctx, sdb)
	if err != nil {
		t.Fatal(err)
	}
	_, err = outbox.New(ctx, db, outbox.Config{SkipMigrate: true})
	if !errors.Is(err, migrate.ErrBehind) || !strings.Contains(err.Error(), "001_outbox") || !strings.Contains(err.Error(), "idem migrate") {
		t.Fatalf("outbox.New with SkipMigrate on an empty schema = %v, want ErrBehind naming 001_outbox and the fix", err)
	}
	script, _, err := run(t, "migrate", "print", "--dialect", "postgres")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sdb.ExecContext(ctx, script); err != nil {
		t.Fatalf("applying the printed script as psql would: %v", err)
	}
	if _, err := outbox.New(ctx, db, outbox.Config{SkipMigrate: true}); err != nil {
		t.Fatalf("outbox.New with SkipMigrate after the printed script: %v", err)
	}
}

func TestMigrateBadCommandLines(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"migrate"}, "name an action"},
		{[]string{"migrate", "sideways"}, "unknown action"},
		{[]string{"migrate", "up"}, "--db is required"},
		{[]string{"migrate", "up", "--db", "mongodb://x"}, "unknown database"},
		{[]string{"migrate", "print"}, "--dialect is required"},
		{[]string{"migrate", "print", "--dialect", "oracle"}, "use postgres, sqlite or mysql"},
		{[]string{"migrate", "print", "--dialect", "sqlite", "--component", "nope"}, `--component "nope"`},
		{[]string{"migrate", "print", "--dialect", "sqlite", "--table", "custom"}, "fixed name"},
		{[]string{"migrate", "print", "--dialect", "postgres", "--table", "Bad-Name"}, "lowercase SQL identifier"},
	} {
		_, stderr, err := run(t, tc.args...)
		if err == nil || !strings.Contains(err.Error()+stderr, tc.want) {
			t.Errorf("idem %s = %v (stderr %q), want an error saying %q", strings.Join(tc.args, " "), err, stderr, tc.want)
		}
	}
}

// The same commands on MySQL/MariaDB, through a mysql:// URL.
func TestMigrateMySQL(t *testing.T) {
	t.Parallel()
	db := testsvc.MySQLDatabase(t)
	out, _, err := run(t, "migrate", "up", "--db", db, "--table", "order_keys")
	if err != nil || !strings.Contains(out, "applied records (order_keys)") {
		t.Fatalf("migrate up on mysql = %v:\n%s", err, out)
	}
	out, _, err = run(t, "migrate", "status", "--db", db, "--table", "order_keys")
	if err != nil || !strings.Contains(out, "order_keys") || strings.Contains(out, "001_records") {
		t.Fatalf("status = %v:\n%s", err, out)
	}
	if out, _, err = run(t, "migrate", "down", "--db", db, "--table", "order_keys", "--component", "records"); err != nil || !strings.Contains(out, "rolled back records (order_keys)") {
		t.Fatalf("down = %v:\n%s", err, out)
	}
	if out, _, err = run(t, "migrate", "print", "--dialect", "mysql"); err != nil || !strings.Contains(out, "INSERT IGNORE INTO idem_migrations") {
		t.Fatalf("print --dialect mysql = %v:\n%s", err, out)
	}
}
