package idemsqlite

import (
	"context"
	"database/sql"
	"embed"
	"fmt"

	"github.com/idemhq/idem/internal/migrations"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// migrate brings the schema to the newest embedded version. It runs in one
// BEGIN IMMEDIATE transaction on its own connection, so two processes opening the
// same new file at once apply each migration exactly once, and a failed migration
// leaves the previous schema intact. The version lives in idem_migrations rather than
// PRAGMA user_version, which belongs to the application that shares the file.
func migrate(ctx context.Context, db *sql.DB, now int64) (err error) {
	ms, err := migrations.Load(migrationFiles, "migrations")
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
	if newest := ms[len(ms)-1].Version; current > newest {
		return fmt.Errorf("the database schema is version %d, newer than this idemsqlite knows (%d): upgrade github.com/idemhq/idem", current, newest)
	}
	for _, m := range ms {
		if m.Version <= current {
			continue
		}
		if _, err := conn.ExecContext(ctx, m.SQL); err != nil {
			return fmt.Errorf("migration %s: %w", m.Name, err)
		}
		if _, err := conn.ExecContext(ctx, "INSERT INTO idem_migrations (version, name, applied_ns) VALUES (?, ?, ?)",
			m.Version, m.Name, now); err != nil {
			return err
		}
	}
	_, err = conn.ExecContext(ctx, "COMMIT")
	return err
}
