package idempg

import (
	"context"
	"embed"
	"fmt"
	"io/fs"
	"sort"
	"strconv"
	"strings"
)

// migrationFiles are applied in name order; the number before the first _ is the
// version recorded in idem_migrations. Files are never edited once released: a
// change is a new file.
//
//go:embed migrations/*.sql
var migrationFiles embed.FS

type migration struct {
	version int
	name    string
	sql     string
}

func loadMigrations() ([]migration, error) {
	paths, err := fs.Glob(migrationFiles, "migrations/*.sql")
	if err != nil {
		return nil, err
	}
	sort.Strings(paths)
	out := make([]migration, 0, len(paths))
	for _, p := range paths {
		name := strings.TrimPrefix(p, "migrations/")
		num, _, _ := strings.Cut(name, "_")
		v, err := strconv.Atoi(num)
		if err != nil {
			return nil, fmt.Errorf("migration %s: name must start with a version number: %w", name, err)
		}
		body, err := migrationFiles.ReadFile(p)
		if err != nil {
			return nil, err
		}
		out = append(out, migration{version: v, name: name, sql: string(body)})
	}
	return out, nil
}

// The statements around the migrations. The advisory lock is per schema, so stores
// starting together (8 processes after a deploy) queue instead of racing on
// CREATE ... IF NOT EXISTS, which is not safe against concurrent creation.
const (
	migrateLockSQL    = `SELECT pg_advisory_xact_lock(hashtextextended('idempg.migrate:' || COALESCE(current_schema(), ''), 0))`
	migrateTableSQL   = `CREATE TABLE IF NOT EXISTS idem_migrations (component text NOT NULL, version int NOT NULL, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT clock_timestamp(), PRIMARY KEY (component, version))`
	migrateAppliedSQL = `SELECT COALESCE(max(version), 0) FROM idem_migrations WHERE component = $1`
	migrateRecordSQL  = `INSERT INTO idem_migrations (component, version, name) VALUES ($1, $2, $3)`
)

// migrate brings the table of n up to date in one transaction. The component key is
// the table name, so two stores with different tables in one schema migrate apart.
func migrate(ctx context.Context, tx inTx, table string, n names) error {
	ms, err := loadMigrations()
	if err != nil {
		return err
	}
	return tx(ctx, func(c conn) error {
		if _, err := c.exec(ctx, migrateLockSQL); err != nil {
			return err
		}
		if _, err := c.exec(ctx, migrateTableSQL); err != nil {
			return err
		}
		var applied int
		if err := c.queryRow(ctx, migrateAppliedSQL, table).Scan(&applied); err != nil {
			return err
		}
		for _, m := range ms {
			if m.version <= applied {
				continue
			}
			// No arguments: both drivers send it with the simple protocol, which
			// accepts several statements in one string.
			if _, err := c.exec(ctx, n.fill(m.sql)); err != nil {
				return fmt.Errorf("%s: %w", m.name, err)
			}
			if _, err := c.exec(ctx, migrateRecordSQL, table, m.version, m.name); err != nil {
				return err
			}
		}
		return nil
	})
}
