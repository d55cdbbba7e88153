package migrate

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/internal/wait"
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
	m := db.Driver.Migrate()
	return retryBusy(ctx, m, func() error {
		return locked(ctx, db, func(q idemsql.Querier, applied map[string]int) error {
			for _, p := range plans {
				for _, st := range p.Steps {
					if st.Version <= applied[p.Name] {
						continue
					}
					// No arguments: both drivers of PostgreSQL send the text with the
					// simple protocol, which runs several statements; so does SQLite.
					if err := execScript(ctx, m, q, st.Up); err != nil {
						return fmt.Errorf("migrate %s %s: %w", p.Set, st.Name, err)
					}
					if _, err := q.Exec(ctx, m.Record, p.Name, st.Version, st.Name); err != nil {
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
	m := db.Driver.Migrate()
	// A read that meets a busy database (SQLite can answer a reader SQLITE_BUSY
	// while a checkpoint resets its log) is tried again: given up, it would send
	// a restart to queue for the write lock behind every writer.
	if err := retryBusy(ctx, m, func() error {
		return db.Read(ctx, func(q idemsql.Querier) (err error) {
			applied, err = readApplied(ctx, m, q)
			return err
		})
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
	m := db.Driver.Migrate()
	err = retryBusy(ctx, m, func() error {
		return locked(ctx, db, func(q idemsql.Querier, applied map[string]int) error {
			v := applied[set.Name]
			for _, st := range plans[0].Steps {
				if st.Version != v {
					continue
				}
				if err := execScript(ctx, m, q, st.Down); err != nil {
					return fmt.Errorf("migrate down %s %s: %w", set, st.Name, err)
				}
				if _, err := q.Exec(ctx, m.Forget, set.Name, v); err != nil {
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
		applied, err = readApplied(ctx, db.Driver.Migrate(), db.Querier(tx))
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
	m := db.Driver.Migrate()
	if m.CreateBeforeLock {
		if err := db.InTx(ctx, func(tx Tx) error {
			_, err := db.Querier(tx).Exec(ctx, m.CreateTable)
			return err
		}); err != nil {
			return &idem.BackendError{Backend: db.Dialect().String(), Op: "migrate", Err: err}
		}
	}
	err := db.InTx(ctx, func(tx Tx) error {
		q := db.Querier(tx)
		if err := lock(ctx, m, q); err != nil {
			return err
		}
		if m.Unlock != "" {
			defer q.Exec(context.WithoutCancel(ctx), m.Unlock) //nolint:errcheck // the session's end releases it too
		}
		if !m.CreateBeforeLock {
			if _, err := q.Exec(ctx, m.CreateTable); err != nil {
				return err
			}
		}
		if err := upgradeFirstShape(ctx, m, q); err != nil {
			return err
		}
		applied, err := readApplied(ctx, m, q)
		if err != nil {
			return err
		}
		return fn(q, applied)
	})
	if err != nil {
		return &idem.BackendError{Backend: db.Dialect().String(), Op: "migrate", Err: err}
	}
	return nil
}

// lock takes the migration lock in the transaction of q.
func lock(ctx context.Context, m *idemsql.MigrateSQL, q idemsql.Querier) error {
	if !m.LockReportsGot {
		_, err := q.Exec(ctx, m.Lock)
		return err
	}
	var got sql.NullInt64
	if err := q.QueryRow(ctx, m.Lock).Scan(&got); err != nil {
		return err
	}
	if got.Int64 != 1 {
		return fmt.Errorf("another process held the migration lock for as long as %s waits", m.Lock)
	}
	return nil
}

// execScript runs a migration file: whole, or statement by statement where the
// driver runs one statement per call (SplitStatements).
func execScript(ctx context.Context, m *idemsql.MigrateSQL, q idemsql.Querier, script string) error {
	if !m.SplitStatements {
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
// not exist. A table in its first shape (idemsqlite's first release) holds the
// records table's versions alone.
func readApplied(ctx context.Context, m *idemsql.MigrateSQL, q idemsql.Querier) (map[string]int, error) {
	exists, firstShape, err := shape(ctx, m, q)
	if err != nil || !exists {
		return map[string]int{}, err
	}
	if firstShape {
		var v int
		err := q.QueryRow(ctx, m.FirstShapeApplied).Scan(&v)
		return map[string]int{DefaultRecordsTable: v}, err
	}
	rows, err := q.Query(ctx, m.Applied)
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

func shape(ctx context.Context, m *idemsql.MigrateSQL, q idemsql.Querier) (exists, firstShape bool, err error) {
	err = q.QueryRow(ctx, m.Shape).Scan(&exists, &firstShape)
	return exists, firstShape, err
}

// upgradeFirstShape rewrites a first-shape idem_migrations into the shape every
// database shares, keeping its rows as the records table's.
func upgradeFirstShape(ctx context.Context, m *idemsql.MigrateSQL, q idemsql.Querier) error {
	if len(m.Upgrade) == 0 {
		return nil
	}
	_, first, err := shape(ctx, m, q)
	if err != nil || !first {
		return err
	}
	for _, stmt := range m.Upgrade {
		if _, err := q.Exec(ctx, stmt); err != nil {
			return fmt.Errorf("upgrade idem_migrations: %w", err)
		}
	}
	return nil
}

// busyFor bounds how long a migration is tried again while another process holds
// the database in a way the driver does not wait out (SQLite switching to WAL).
const busyFor = 10 * time.Second

func retryBusy(ctx context.Context, m *idemsql.MigrateSQL, fn func() error) error {
	deadline := time.Now().Add(busyFor)
	for pause := time.Millisecond; ; pause = min(2*pause, 100*time.Millisecond) {
		err := fn()
		if err == nil || !busy(m, err) || time.Now().After(deadline) || !wait.Sleep(ctx, pause) {
			return err
		}
	}
}

// busy reports whether err is one of the driver's BusyErrors.
func busy(m *idemsql.MigrateSQL, err error) bool {
	s := err.Error()
	for _, b := range m.BusyErrors {
		if strings.Contains(s, b) {
			return true
		}
	}
	return false
}

// Ensure is what a constructor calls: Up, or with skip (its Config.SkipMigrate)
// Require, which runs no DDL.
func Ensure[Tx any](ctx context.Context, db idemsql.TxDB[Tx], skip bool, sets ...Set) error {
	if skip {
		return Require(ctx, db, sets...)
	}
	return Up(ctx, db, sets...)
}
