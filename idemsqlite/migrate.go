package idemsqlite

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"io/fs"
	"sort"
	"strconv"
	"strings"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

type migration struct {
	version int
	name    string
	sql     string
}

// migrations returns the embedded migrations in version order. Their names are
// NNNN_description.sql; the number is the schema version the file brings.
func migrations() ([]migration, error) {
	entries, err := fs.ReadDir(migrationFiles, "migrations")
	if err != nil {
		return nil, err
	}
	var ms []migration
	for _, e := range entries {
		num, _, ok := strings.Cut(e.Name(), "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || v <= 0 {
			return nil, fmt.Errorf("migration %q is not named NNNN_description.sql", e.Name())
		}
		text, err := migrationFiles.ReadFile("migrations/" + e.Name())
		if err != nil {
			return nil, err
		}
		ms = append(ms, migration{version: v, name: e.Name(), sql: string(text)})
	}
	sort.Slice(ms, func(i, j int) bool { return ms[i].version < ms[j].version })
	return ms, nil
}

// migrate brings the schema to the newest embedded version. It runs in one
// BEGIN IMMEDIATE transaction on its own connection, so two processes opening the
// same new file at once apply each migration exactly once, and a failed migration
// leaves the previous schema intact. The version lives in idem_migrations rather than
// PRAGMA user_version, which belongs to the application that shares the file.
func migrate(ctx context.Context, db *sql.DB, now int64) (err error) {
	ms, err := migrations()
	if err != nil {
		return err
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_, _ = conn.ExecContext(context.WithoutCancel(ctx), "ROLLBACK")
		}
	}()
	if _, err := conn.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS idem_migrations (
		version    INTEGER PRIMARY KEY,
		name       TEXT    NOT NULL,
		applied_ns INTEGER NOT NULL
	)`); err != nil {
		return err
	}
	var current int
	if err := conn.QueryRowContext(ctx, "SELECT COALESCE(MAX(version), 0) FROM idem_migrations").Scan(&current); err != nil {
		return err
	}
	if newest := ms[len(ms)-1].version; current > newest {
		return fmt.Errorf("the database schema is version %d, newer than this idemsqlite knows (%d): upgrade github.com/idemhq/idem", current, newest)
	}
	for _, m := range ms {
		if m.version <= current {
			continue
		}
		if _, err := conn.ExecContext(ctx, m.sql); err != nil {
			return fmt.Errorf("migration %s: %w", m.name, err)
		}
		if _, err := conn.ExecContext(ctx, "INSERT INTO idem_migrations (version, name, applied_ns) VALUES (?, ?, ?)",
			m.version, m.name, now); err != nil {
			return err
		}
	}
	_, err = conn.ExecContext(ctx, "COMMIT")
	return err
}
