package idempg

import (
	"context"
	"embed"
	"fmt"

	"github.com/idemhq/idem/internal/migrations"
)

// migrationFiles are applied in name order; the number before the first _ is the
// version recorded in idem_migrations. Files are never edited once released: a
// change is a new file.
//
//go:embed migrations/*.sql
var migrationFiles embed.FS

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
	ms, err := migrations.Load(migrationFiles, "migrations")
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
			if m.Version <= applied {
				continue
			}
			// No arguments: both drivers send it with the simple protocol, which
			// accepts several statements in one string.
			if _, err := c.exec(ctx, n.fill(m.SQL)); err != nil {
				return fmt.Errorf("%s: %w", m.Name, err)
			}
			if _, err := c.exec(ctx, migrateRecordSQL, table, m.Version, m.Name); err != nil {
				return err
			}
		}
		return nil
	})
}
