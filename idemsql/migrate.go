package idemsql

// MigrateSQL is the migrate family of a Driver: how package migrate keeps its
// bookkeeping table idem_migrations (one row per applied migration: component,
// version, name, applied_at) and serialises the processes that migrate at once.
// The migrations themselves are files of package migrate, under
// sql/<dialect>/<component>/.
//
// Up reads the applied versions without a lock first (Applied); if something is
// pending, it runs one transaction that takes Lock, creates the table (CreateTable,
// before that transaction where CreateBeforeLock says so), upgrades a first-shape
// table (Shape, Upgrade), reads Applied again, and runs each pending migration
// followed by Record. Down runs a migration's down file and Forget the same way.
type MigrateSQL struct {
	// CreateTable creates idem_migrations if it is missing: component (a name of
	// up to 255 bytes), version (an int), name (up to 255 bytes), applied_at (the
	// time of the insert, by default), primary key (component, version). No
	// arguments.
	CreateTable string
	// CreateBeforeLock runs CreateTable in a transaction of its own before the
	// locking transaction, instead of after Lock inside it: for a database whose
	// lock is the transaction's first write (SQLite).
	CreateBeforeLock bool
	// Lock takes the lock that serialises migrators, in the transaction, waiting
	// for it. It returns no rows unless LockReportsGot.
	Lock string
	// LockReportsGot: Lock returns one row, one column, 1 when it got the lock and
	// anything else when it gave up waiting (MySQL's GET_LOCK).
	LockReportsGot bool
	// Unlock, where set, releases a lock that outlives the transaction (MySQL's
	// named lock belongs to the connection), before the connection goes back to
	// the pool. Empty where the transaction's end releases it.
	Unlock string
	// Shape returns one row: whether idem_migrations exists, and whether it has a
	// first shape that Upgrade rewrites (both booleans; the second false where
	// Upgrade is empty). No arguments.
	Shape string
	// Upgrade, where set, rewrites a first-shape idem_migrations into CreateTable's,
	// keeping its rows as the records table's, statement by statement under the
	// lock. idemsqlite's first release kept (version, name, applied_ns) for its
	// records table alone.
	Upgrade []string
	// FirstShapeApplied returns the newest version (0 for none) recorded in a
	// first-shape table: one row, one column. Empty where Upgrade is.
	FirstShapeApplied string
	// Applied returns the newest version of each component: rows of (component,
	// version). No arguments.
	Applied string
	// Record records that the migration named $3, version $2 of component $1 is
	// applied.
	Record string
	// Forget deletes the record of component $1, version $2.
	Forget string
	// SplitStatements: the driver runs one statement per Exec (go-sql-driver/mysql
	// without multiStatements), so a migration file runs statement by statement,
	// split as migrate.Statements splits it.
	SplitStatements bool
	// BusyErrors are what an error's message contains when another process holds
	// the database in a way the driver's own waiting does not cover (SQLite while
	// a first opener switches the file to WAL): Up and Down are tried again for a
	// bounded time when one matches. None for a database that waits for its locks.
	BusyErrors []string

	// The rest is what a tool that keeps tables of its own beside idem's needs to
	// say the same thing in every database: idem migrate print, and cmd/idem's
	// verify harness.

	// InsertIgnore returns an INSERT of values into columns of table that does
	// nothing where the row's key exists (ON CONFLICT DO NOTHING, INSERT IGNORE):
	// each argument is SQL text, columns and values comma-separated.
	InsertIgnore func(table, columns, values string) string
	// KeyText is the type of a text column that can be a key or be indexed and
	// holds up to 255 bytes: TEXT, or VARCHAR(255) where a TEXT cannot be a key.
	KeyText string
	// Random is an expression with a new random value in every row, to order rows
	// at random: random(), RAND().
	Random string
}
