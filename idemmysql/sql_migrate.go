package idemmysql

import "github.com/idemhq/idem/idemsql"

func (driver) Migrate() *idemsql.MigrateSQL { return &migrateStmts }

// The lock is a named lock per database, GET_LOCK, which waits 60 s at most and
// belongs to the connection, not to the transaction: Unlock releases it. The
// driver runs one statement per call unless the DSN sets multiStatements, so
// migration files are split. MySQL also commits DDL on its own: a migration
// interrupted there is applied again, which its IF NOT EXISTS and OR REPLACE
// statements allow.
var migrateStmts = idemsql.MigrateSQL{
	CreateTable: "CREATE TABLE IF NOT EXISTS idem_migrations (component VARCHAR(255) NOT NULL, version INT NOT NULL, name VARCHAR(255) NOT NULL, " +
		"applied_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6), PRIMARY KEY (component, version)) ENGINE=InnoDB",
	Lock:           `SELECT GET_LOCK(CONCAT('idem.migrate:', COALESCE(DATABASE(), '')), 60)`,
	LockReportsGot: true,
	Unlock:         `SELECT RELEASE_LOCK(CONCAT('idem.migrate:', COALESCE(DATABASE(), '')))`,
	Shape: `SELECT COUNT(*) > 0, false FROM information_schema.tables
		WHERE table_schema = DATABASE() AND table_name = 'idem_migrations'`,
	Applied:         `SELECT component, MAX(version) FROM idem_migrations GROUP BY component`,
	Record:          `INSERT INTO idem_migrations (component, version, name) VALUES ($1, $2, $3)`,
	Forget:          `DELETE FROM idem_migrations WHERE component = $1 AND version = $2`,
	SplitStatements: true,

	InsertIgnore: func(table, columns, values string) string {
		return "INSERT IGNORE INTO " + table + " (" + columns + ") VALUES (" + values + ")"
	},
	KeyText: "VARCHAR(255)",
	Random:  "RAND()",
}
