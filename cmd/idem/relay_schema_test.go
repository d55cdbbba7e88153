package main

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemhq/idem/cmd/idem/internal/open"
	"github.com/idemhq/idem/idemmysql"
	"github.com/idemhq/idem/idempg"
	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/internal/testsvc"
	"github.com/idemhq/idem/outbox"
)

func TestRelaySchema(t *testing.T) {
	t.Parallel()
	stdout, _, err := run(t, "relay", "--schema")
	if err != nil {
		t.Fatalf("--schema: %v", err)
	}
	for _, want := range []string{"-- PostgreSQL", "-- SQLite", "-- MySQL/MariaDB", "BYTEA", "BLOB", "LONGBLOB", "VALUES (?, ?, ?, ?, ?, ?, ?, ?)", "INSERT INTO idem_outbox", "FNV-1a", "pg_notify('idem_outbox', '')"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("--schema lacks %q:\n%s", want, stdout)
		}
	}
	stdout, _, _ = run(t, "relay", "--schema", "--db", "sqlite:x.db")
	if strings.Contains(stdout, "PostgreSQL") || !strings.Contains(stdout, "BLOB") {
		t.Errorf("--schema --db sqlite:… should print SQLite only:\n%s", stdout)
	}
	stdout, _, _ = run(t, "relay", "--schema", "--db", "mysql://u@h:3306/db")
	if strings.Contains(stdout, "-- PostgreSQL\n") || strings.Contains(stdout, "-- SQLite\n") || strings.Contains(stdout, "pg_notify") ||
		!strings.Contains(stdout, "ENGINE=InnoDB") || !strings.Contains(stdout, "? placeholders") {
		t.Errorf("--schema --db mysql://… should print MySQL only, with ? placeholders and no pg_notify:\n%s", stdout)
	}
}

// The printed MySQL schema is the table outbox.New creates.
func TestRelaySchemaMatchesOutboxMySQL(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	describe := func(db *sql.DB) string {
		t.Helper()
		rows, err := db.QueryContext(ctx, `SELECT CONCAT(table_name, ' ', column_name, ' ', column_type, ' ', is_nullable, ' ', COALESCE(column_default, ''), ' ', extra)
				FROM information_schema.columns WHERE table_schema = DATABASE() AND table_name LIKE 'idem_outbox%'
			UNION ALL
			SELECT CONCAT(table_name, ' ', index_name, ' ', seq_in_index, ' ', column_name, ' ', non_unique)
				FROM information_schema.statistics WHERE table_schema = DATABASE() AND table_name LIKE 'idem_outbox%'
			UNION ALL
			SELECT CONCAT('parts ', COUNT(*)) FROM idem_outbox_parts
			ORDER BY 1`)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var lines []string
		for rows.Next() {
			var l string
			if err := rows.Scan(&l); err != nil {
				t.Fatal(err)
			}
			lines = append(lines, l)
		}
		if len(lines) < 13 {
			t.Fatalf("describe: too little:\n%s", strings.Join(lines, "\n"))
		}
		return strings.Join(lines, "\n")
	}
	open := func() *sql.DB {
		// The printed schema is a script: run it as one, as a migration tool would.
		return testsvc.OpenMySQL(t, testsvc.MySQLDatabase(t)+"?multiStatements=true")
	}
	byOutbox, byPrinted := open(), open()
	if _, err := outbox.New(ctx, idemmysql.TxDB(byOutbox), outbox.Config{}); err != nil {
		t.Fatal(err)
	}
	if _, err := byPrinted.ExecContext(ctx, schemaText(idemsql.MySQL)); err != nil {
		t.Fatalf("printed schema does not run: %v", err)
	}
	if a, b := describe(byOutbox), describe(byPrinted); a != b {
		t.Fatalf("--schema has drifted from outbox.New:\noutbox.New:\n%s\n--schema:\n%s", a, b)
	}
}

// The printed SQLite schema is the table outbox.New creates.
func TestRelaySchemaMatchesOutboxSQLite(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	describe := func(db *sql.DB) string {
		t.Helper()
		rows, err := db.QueryContext(ctx, `SELECT name, type, "notnull", COALESCE(dflt_value, ''), pk FROM pragma_table_info('idem_outbox')`)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var b strings.Builder
		for rows.Next() {
			var name, typ, dflt string
			var notnull, pk int
			if err := rows.Scan(&name, &typ, &notnull, &dflt, &pk); err != nil {
				t.Fatal(err)
			}
			fmt.Fprintf(&b, "%s %s %d %s %d\n", name, typ, notnull, dflt, pk)
		}
		idx, err := db.QueryContext(ctx, `SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'idem_outbox' ORDER BY name`)
		if err != nil {
			t.Fatal(err)
		}
		defer idx.Close()
		for idx.Next() {
			var name string
			_ = idx.Scan(&name)
			b.WriteString("index " + name + "\n")
		}
		if strings.Count(b.String(), "\n") < 13 {
			t.Fatalf("describe: too little:\n%s", b.String())
		}
		return b.String()
	}
	open := func(name string) *sql.DB {
		db, err := open.SQLite(filepath.Join(t.TempDir(), name))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		return db
	}
	byOutbox, byPrinted := open("outbox.db"), open("printed.db")
	txdb, err := idemsql.SQLDB(ctx, byOutbox)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := outbox.New(ctx, txdb, outbox.Config{}); err != nil {
		t.Fatal(err)
	}
	if _, err := byPrinted.ExecContext(ctx, schemaText(idemsql.SQLite)); err != nil {
		t.Fatalf("printed schema does not run: %v", err)
	}
	if a, b := describe(byOutbox), describe(byPrinted); a != b {
		t.Fatalf("--schema has drifted from outbox.New:\noutbox.New:\n%s\n--schema:\n%s", a, b)
	}
}

// The printed PostgreSQL schema is the table outbox.New creates.
func TestRelaySchemaMatchesOutboxPostgres(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	describe := func(pool *pgxpool.Pool, schema string) string {
		t.Helper()
		rows, err := pool.Query(ctx, `SELECT column_name || ' ' || data_type || ' ' || is_nullable || ' ' ||
				COALESCE(replace(column_default, $1 || '.', ''), '')
			FROM information_schema.columns WHERE table_schema = $1 AND table_name = 'idem_outbox'
			UNION ALL
			SELECT replace(indexdef, $1 || '.', '') FROM pg_indexes WHERE schemaname = $1 AND tablename = 'idem_outbox'
			ORDER BY 1`, schema)
		if err != nil {
			t.Fatal(err)
		}
		lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil || len(lines) < 13 {
			t.Fatalf("describe %s: %d lines, %v", schema, len(lines), err)
		}
		return strings.Join(lines, "\n")
	}
	open := func() (*pgxpool.Pool, string) {
		cs, schema := testsvc.PostgresSchema(t)
		pool, err := pgxpool.New(ctx, cs)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pool.Close)
		return pool, schema
	}
	byOutbox, s1 := open()
	byPrinted, s2 := open()
	if _, err := outbox.New(ctx, idempg.TxDB(byOutbox), outbox.Config{}); err != nil {
		t.Fatal(err)
	}
	if _, err := byPrinted.Exec(ctx, schemaText(idemsql.Postgres)); err != nil {
		t.Fatalf("printed schema does not run: %v", err)
	}
	if a, b := describe(byOutbox, s1), describe(byPrinted, s2); a != b {
		t.Fatalf("--schema has drifted from outbox.New:\noutbox.New:\n%s\n--schema:\n%s", a, b)
	}
}
