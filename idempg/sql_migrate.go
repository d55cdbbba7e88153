package idempg

import "github.com/idemhq/idem/idemsql"

func (driver) Migrate() *idemsql.MigrateSQL { return &migrateStmts }

// The lock is an advisory lock per schema, which the transaction's end releases
// (the key predates package migrate, so a process of that release waits too).
var migrateStmts = idemsql.MigrateSQL{
	CreateTable: `CREATE TABLE IF NOT EXISTS idem_migrations (component text NOT NULL, version int NOT NULL, name text NOT NULL, ` +
		`applied_at timestamptz NOT NULL DEFAULT clock_timestamp(), PRIMARY KEY (component, version))`,
	Lock:    `SELECT pg_advisory_xact_lock(hashtextextended('idempg.migrate:' || COALESCE(current_schema(), ''), 0))`,
	Shape:   `SELECT to_regclass('idem_migrations') IS NOT NULL, false`,
	Applied: `SELECT component, MAX(version) FROM idem_migrations GROUP BY component`,
	Record:  `INSERT INTO idem_migrations (component, version, name) VALUES ($1, $2, $3)`,
	Forget:  `DELETE FROM idem_migrations WHERE component = $1 AND version = $2`,

	InsertIgnore: func(table, columns, values string) string {
		return "INSERT INTO " + table + " (" + columns + ") VALUES (" + values + ") ON CONFLICT DO NOTHING"
	},
	KeyText: "TEXT",
	Random:  "random()",
}
