package migrate

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/internal/wait"
)

// The bookkeeping table. Its component column holds Set.Name: for the records table
// that is the table's name, as PostgreSQL stores recorded it before this package.
var createTable = map[idemsql.Dialect]string{
	idemsql.Postgres: `CREATE TABLE IF NOT EXISTS idem_migrations (component text NOT NULL, version int NOT NULL, name text NOT NULL, ` +
		`applied_at timestamptz NOT NULL DEFAULT clock_timestamp(), PRIMARY KEY (component, version))`,
	idemsql.SQLite: `CREATE TABLE IF NOT EXISTS idem_migrations (component TEXT NOT NULL, version INTEGER NOT NULL, name TEXT NOT NULL, ` +
		`applied_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')), PRIMARY KEY (component, version))`,
	idemsql.MySQL: "CREATE TABLE IF NOT EXISTS idem_migrations (component VARCHAR(255) NOT NULL, version INT NOT NULL, name VARCHAR(255) NOT NULL, " +
		"applied_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6), PRIMARY KEY (component, version)) ENGINE=InnoDB",
}

// lockSQL serialises migrators. On PostgreSQL it is an advisory lock per schema
// (the key predates this package, so a process of the previous release waits too).
// On SQLite a write as the transaction's first statement takes the write lock, and
// waits for it under busy_timeout; a later write would instead fail at once when
// another writer committed since the transaction's first read.
var lockSQL = map[idemsql.Dialect]string{
	idemsql.Postgres: `SELECT pg_advisory_xact_lock(hashtextextended('idempg.migrate:' || COALESCE(current_schema(), ''), 0))`,
	idemsql.SQLite:   `DELETE FROM idem_migrations WHERE 0`,
	idemsql.MySQL:    `SELECT GET_LOCK(CONCAT('idem.migrate:', COALESCE(DATABASE(), '')), 60)`,
}

// mysqlUnlockSQL releases the named lock, which belongs to the connection, not to
// the transaction: it must be released before the connection goes back to the pool.
const mysqlUnlockSQL = `SELECT RELEASE_LOCK(CONCAT('idem.migrate:', COALESCE(DATABASE(), '')))`

const (
	appliedSQL = `SELECT component, MAX(version) FROM idem_migrations GROUP BY component`
	recordSQL  = `INSERT INTO idem_migrations (component, version, name) VALUES ($1, $2, $3)`
	forgetSQL  = `DELETE FROM idem_migrations WHERE component = $1 AND version = $2`
)

// Up applies every pending migration of sets in one transaction, under the lock.
func Up[Tx any](ctx context.Context, db idemsql.TxDB[Tx], sets ...Set) error {
	plans, err := plan(db, sets)
	if err != nil {
		return err
	}
	if upToDate(ctx, db, plans) {
		return nil // the common case, a restart: no lock, no write
	}
	return retryBusy(ctx, db.Dialect(), func() error {
		return locked(ctx, db, func(q idemsql.Querier, applied map[string]int) error {
			for _, p := range plans {
				for _, st := range p.Steps {
					if st.Version <= applied[p.Name] {
						continue
					}
					// No arguments: both drivers of PostgreSQL send the text with the
					// simple protocol, which runs several statements; so does SQLite.
					if err := execScript(ctx, db.Dialect(), q, st.Up); err != nil {
						return fmt.Errorf("migrate %s %s: %w", p.Set, st.Name, err)
					}
					if _, err := q.Exec(ctx, recordSQL, p.Name, st.Version, st.Name); err != nil {
						return err
					}
				}
			}
			return nil
		})
	})
}

// upToDate reports whether every plan is applied already, read without a lock
// where db can read outside a transaction. A failed read says no: Up then takes
// the lock and looks again.
func upToDate[Tx any](ctx context.Context, db idemsql.TxDB[Tx], plans []State) bool {
	if db.Read == nil {
		return false
	}
	var applied map[string]int
	if err := db.Read(ctx, func(q idemsql.Querier) (err error) {
		applied, err = readApplied(ctx, db.Dialect(), q)
		return err
	}); err != nil {
		return false
	}
	for _, p := range plans {
		if applied[p.Name] < p.Newest {
			return false
		}
	}
	return true
}

// Down rolls back the newest applied migration of set and returns it; ok is false
// when nothing of set is applied.
func Down[Tx any](ctx context.Context, db idemsql.TxDB[Tx], set Set) (rolled Step, ok bool, err error) {
	plans, err := plan(db, []Set{set})
	if err != nil {
		return Step{}, false, err
	}
	err = retryBusy(ctx, db.Dialect(), func() error {
		return locked(ctx, db, func(q idemsql.Querier, applied map[string]int) error {
			v := applied[set.Name]
			for _, st := range plans[0].Steps {
				if st.Version != v {
					continue
				}
				if err := execScript(ctx, db.Dialect(), q, st.Down); err != nil {
					return fmt.Errorf("migrate down %s %s: %w", set, st.Name, err)
				}
				if _, err := q.Exec(ctx, forgetSQL, set.Name, v); err != nil {
					return err
				}
				rolled, ok = st, true
				return nil
			}
			if v != 0 {
				return fmt.Errorf("migrate down %s: version %d is applied, but this build does not know it: roll back with the build that applied it", set, v)
			}
			return nil
		})
	})
	return rolled, ok, err
}

// Status reads how far each set is applied, without changing anything.
func Status[Tx any](ctx context.Context, db idemsql.TxDB[Tx], sets ...Set) ([]State, error) {
	plans, err := plan(db, sets)
	if err != nil {
		return nil, err
	}
	var applied map[string]int
	err = db.InTx(ctx, func(tx Tx) (err error) {
		applied, err = readApplied(ctx, db.Dialect(), db.Querier(tx))
		return err
	})
	if err != nil {
		return nil, &idem.BackendError{Backend: db.Dialect().String(), Op: "migrate.status", Err: err}
	}
	for i := range plans {
		plans[i].Applied = applied[plans[i].Name]
	}
	return plans, nil
}

// Require returns a *BehindError if a set lacks a migration this build has, and runs
// no DDL: what a constructor with SkipMigrate calls.
func Require[Tx any](ctx context.Context, db idemsql.TxDB[Tx], sets ...Set) error {
	states, err := Status(ctx, db, sets...)
	if err != nil {
		return err
	}
	for _, s := range states {
		if p := s.Pending(); len(p) > 0 {
			return &BehindError{Dialect: db.Dialect(), Set: s.Set, Applied: s.Applied, Needed: s.Newest, Missing: p[0].Name}
		}
	}
	return nil
}

func plan[Tx any](db idemsql.TxDB[Tx], sets []Set) ([]State, error) {
	if err := db.Validate(); err != nil {
		return nil, err
	}
	out := make([]State, 0, len(sets))
	for _, s := range sets {
		steps, err := Steps(db.Dialect(), s)
		if err != nil {
			return nil, err
		}
		out = append(out, State{Set: s, Steps: steps, Newest: steps[len(steps)-1].Version})
	}
	return out, nil
}

// locked runs fn in a transaction that holds the migration lock, with the versions
// applied so far.
func locked[Tx any](ctx context.Context, db idemsql.TxDB[Tx], fn func(q idemsql.Querier, applied map[string]int) error) error {
	d := db.Dialect()
	if d == idemsql.SQLite {
		// Created before the locking transaction, whose first statement must write.
		if err := db.InTx(ctx, func(tx Tx) error {
			_, err := db.Querier(tx).Exec(ctx, createTable[d])
			return err
		}); err != nil {
			return &idem.BackendError{Backend: d.String(), Op: "migrate", Err: err}
		}
	}
	err := db.InTx(ctx, func(tx Tx) error {
		q := db.Querier(tx)
		if err := lock(ctx, d, q); err != nil {
			return err
		}
		if d == idemsql.MySQL {
			defer q.Exec(context.WithoutCancel(ctx), mysqlUnlockSQL) //nolint:errcheck // the session's end releases it too
		}
		if d != idemsql.SQLite {
			if _, err := q.Exec(ctx, createTable[d]); err != nil {
				return err
			}
		}
		if err := upgradeSQLiteTable(ctx, d, q); err != nil {
			return err
		}
		applied, err := readApplied(ctx, d, q)
		if err != nil {
			return err
		}
		return fn(q, applied)
	})
	if err != nil {
		return &idem.BackendError{Backend: d.String(), Op: "migrate", Err: err}
	}
	return nil
}

// lock takes the migration lock of d in the transaction of q.
func lock(ctx context.Context, d idemsql.Dialect, q idemsql.Querier) error {
	if d != idemsql.MySQL {
		_, err := q.Exec(ctx, lockSQL[d])
		return err
	}
	var got sql.NullInt64
	if err := q.QueryRow(ctx, lockSQL[d]).Scan(&got); err != nil {
		return err
	}
	if got.Int64 != 1 {
		return errors.New("another process held the migration lock (GET_LOCK idem.migrate) for 60 s")
	}
	return nil
}

// execScript runs a migration file. MySQL's driver runs one statement per call
// unless the DSN sets multiStatements, so there the file is split into statements
// as the mysql client splits it (Statements). MySQL also commits DDL on its own: a
// migration interrupted there is applied again, which its IF NOT EXISTS and OR
// REPLACE statements allow.
func execScript(ctx context.Context, d idemsql.Dialect, q idemsql.Querier, script string) error {
	if d != idemsql.MySQL {
		_, err := q.Exec(ctx, script)
		return err
	}
	for _, stmt := range Statements(script) {
		if _, err := q.Exec(ctx, stmt); err != nil {
			return err
		}
	}
	return nil
}

// Statements splits a MySQL script into its statements as the mysql client does: at
// the delimiter (";" until a DELIMITER line changes it) that ends a line. Comment
// lines and empty statements are dropped. For tools that send a printed script one
// statement at a time.
func Statements(script string) []string {
	var out []string
	var cur strings.Builder
	delim := ";"
	for _, line := range strings.Split(script, "\n") {
		t := strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(t, "--") && cur.Len() == 0:
			continue
		case strings.HasPrefix(strings.ToUpper(t), "DELIMITER "):
			delim = strings.TrimSpace(t[len("DELIMITER "):])
			continue
		}
		cur.WriteString(line + "\n")
		if strings.HasSuffix(t, delim) {
			if stmt := strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(cur.String()), delim)); stmt != "" {
				out = append(out, stmt)
			}
			cur.Reset()
		}
	}
	if stmt := strings.TrimSpace(cur.String()); stmt != "" {
		out = append(out, stmt)
	}
	return out
}

// readApplied returns the newest version of each name; none if idem_migrations does
// not exist. An idemsqlite file from before this package has the table in its first
// shape (version, name, applied_ns), all of it the records table's.
func readApplied(ctx context.Context, d idemsql.Dialect, q idemsql.Querier) (map[string]int, error) {
	exists, firstShape, err := tableShape(ctx, d, q)
	if err != nil || !exists {
		return map[string]int{}, err
	}
	if firstShape {
		var v int
		err := q.QueryRow(ctx, `SELECT COALESCE(MAX(version), 0) FROM idem_migrations`).Scan(&v)
		return map[string]int{DefaultRecordsTable: v}, err
	}
	rows, err := q.Query(ctx, appliedSQL)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	applied := map[string]int{}
	for rows.Next() {
		var name string
		var v int
		if err := rows.Scan(&name, &v); err != nil {
			return nil, err
		}
		applied[name] = v
	}
	return applied, rows.Err()
}

func tableShape(ctx context.Context, d idemsql.Dialect, q idemsql.Querier) (exists, firstShape bool, err error) {
	switch d {
	case idemsql.Postgres:
		err = q.QueryRow(ctx, `SELECT to_regclass('idem_migrations') IS NOT NULL`).Scan(&exists)
		return exists, false, err
	case idemsql.MySQL:
		err = q.QueryRow(ctx, `SELECT COUNT(*) > 0 FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name = 'idem_migrations'`).Scan(&exists)
		return exists, false, err
	}
	var cols, component int
	err = q.QueryRow(ctx, `SELECT COUNT(*), COUNT(*) FILTER (WHERE name = 'component') FROM pragma_table_info('idem_migrations')`).
		Scan(&cols, &component)
	return cols > 0, cols > 0 && component == 0, err
}

// upgradeSQLiteTable rewrites idemsqlite's first idem_migrations into the shape
// every dialect shares, keeping its rows as the records table's.
func upgradeSQLiteTable(ctx context.Context, d idemsql.Dialect, q idemsql.Querier) error {
	if d != idemsql.SQLite {
		return nil
	}
	_, first, err := tableShape(ctx, d, q)
	if err != nil || !first {
		return err
	}
	for _, stmt := range []string{
		`ALTER TABLE idem_migrations RENAME TO idem_migrations_first`,
		createTable[d],
		`INSERT INTO idem_migrations (component, version, name, applied_at)
			SELECT 'idem_records', version, replace(replace(name, '0001_init.sql', '001_records'), '.sql', ''),
				strftime('%Y-%m-%dT%H:%M:%fZ', applied_ns / 1e9, 'unixepoch') FROM idem_migrations_first`,
		`DROP TABLE idem_migrations_first`,
	} {
		if _, err := q.Exec(ctx, stmt); err != nil {
			return fmt.Errorf("upgrade idem_migrations: %w", err)
		}
	}
	return nil
}

// busyFor bounds how long a SQLite migration is tried again while another process
// holds the file in a way busy_timeout does not wait out (switching it to WAL).
const busyFor = 10 * time.Second

func retryBusy(ctx context.Context, d idemsql.Dialect, fn func() error) error {
	deadline := time.Now().Add(busyFor)
	for pause := time.Millisecond; ; pause = min(2*pause, 100*time.Millisecond) {
		err := fn()
		if err == nil || d != idemsql.SQLite || !busy(err) || time.Now().After(deadline) || !wait.Sleep(ctx, pause) {
			return err
		}
	}
}

func busy(err error) bool {
	s := err.Error()
	return strings.Contains(s, "SQLITE_BUSY") || strings.Contains(s, "database is locked")
}

// Ensure is what a constructor calls: Up, or with skip (its Config.SkipMigrate)
// Require, which runs no DDL.
func Ensure[Tx any](ctx context.Context, db idemsql.TxDB[Tx], skip bool, sets ...Set) error {
	if skip {
		return Require(ctx, db, sets...)
	}
	return Up(ctx, db, sets...)
}
