package idemsqlite

import "github.com/idemhq/idem/idemsql"

func (driver) Migrate() *idemsql.MigrateSQL { return &migrateStmts }

const createMigrations = `CREATE TABLE IF NOT EXISTS idem_migrations (component TEXT NOT NULL, version INTEGER NOT NULL, name TEXT NOT NULL, ` +
	`applied_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')), PRIMARY KEY (component, version))`

// The lock is the database's write lock: a write as the transaction's first
// statement takes it, and waits for it under busy_timeout (a later write would
// instead fail at once when another writer committed since the transaction's first
// read), so the table is created before, in a transaction of its own.
var migrateStmts = idemsql.MigrateSQL{
	CreateTable:      createMigrations,
	CreateBeforeLock: true,
	Lock:             `DELETE FROM idem_migrations WHERE 0`,
	// The first shape is (version, name, applied_ns): no component column.
	Shape: `SELECT COUNT(*) > 0, COUNT(*) > 0 AND COUNT(*) FILTER (WHERE name = 'component') = 0
		FROM pragma_table_info('idem_migrations')`,
	Upgrade: []string{
		`ALTER TABLE idem_migrations RENAME TO idem_migrations_first`,
		createMigrations,
		`INSERT INTO idem_migrations (component, version, name, applied_at)
			SELECT 'idem_records', version, replace(replace(name, '0001_init.sql', '001_records'), '.sql', ''),
				strftime('%Y-%m-%dT%H:%M:%fZ', applied_ns / 1e9, 'unixepoch') FROM idem_migrations_first`,
		`DROP TABLE idem_migrations_first`,
	},
	FirstShapeApplied: `SELECT COALESCE(MAX(version), 0) FROM idem_migrations`,
	Applied:           `SELECT component, MAX(version) FROM idem_migrations GROUP BY component`,
	Record:            `INSERT INTO idem_migrations (component, version, name) VALUES ($1, $2, $3)`,
	Forget:            `DELETE FROM idem_migrations WHERE component = $1 AND version = $2`,
	BusyErrors:        []string{"SQLITE_BUSY", "database is locked"},

	InsertIgnore: func(table, columns, values string) string {
		return "INSERT INTO " + table + " (" + columns + ") VALUES (" + values + ") ON CONFLICT DO NOTHING"
	},
	KeyText: "TEXT",
	Random:  "random()",
}
