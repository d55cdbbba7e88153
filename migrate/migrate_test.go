package migrate_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"

	_ "github.com/jackc/pgx/v5/stdlib"
	_ "modernc.org/sqlite"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemmysql"
	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/internal/testsvc"
	"github.com/idemhq/idem/migrate"
)

// opener opens handles on one fresh database: several handles are several processes
// as far as locking goes.
type opener func(t *testing.T) idemsql.TxDB[*sql.Tx]

func forEachDB(t *testing.T, fn func(t *testing.T, d idemsql.Dialect, open opener)) {
	t.Run("sqlite", func(t *testing.T) {
		t.Parallel()
		path := filepath.Join(t.TempDir(), "m.db")
		// No _txlock=immediate: the migrator must take the write lock by itself.
		fn(t, idemsql.SQLite, func(t *testing.T) idemsql.TxDB[*sql.Tx] {
			return handle(t, "sqlite", "file:"+path+"?_pragma=journal_mode(WAL)&_pragma=busy_timeout(10000)")
		})
	})
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		cs, _ := testsvc.PostgresSchema(t)
		fn(t, idemsql.Postgres, func(t *testing.T) idemsql.TxDB[*sql.Tx] { return handle(t, "pgx", cs) })
	})
	t.Run("mysql", func(t *testing.T) {
		t.Parallel()
		dsn, err := idemmysql.DSN(testsvc.MySQLDatabase(t))
		if err != nil {
			t.Fatal(err)
		}
		fn(t, idemsql.MySQL, func(t *testing.T) idemsql.TxDB[*sql.Tx] { return handle(t, "mysql", dsn) })
	})
}

// tables are the tables Up creates in each dialect.
var tables = map[idemsql.Dialect][]string{
	idemsql.Postgres: {"idem_records", "idem_outbox", "idem_outbox_repairs", "idem_cdc_slots", "idem_dead_letters", "idem_effects", "idem_sagas", "idem_saga_resolutions",
		"idem_stream_events", "idem_stream_heads", "idem_stream_clients", "idem_sequences"},
	idemsql.SQLite: {"idem_records", "idem_meta", "idem_outbox", "idem_outbox_repairs", "idem_dead_letters", "idem_effects", "idem_sagas", "idem_saga_resolutions",
		"idem_stream_events", "idem_stream_heads", "idem_stream_clients", "idem_sequences", "idem_hilo"},
	idemsql.MySQL: {"idem_records", "idem_records_tokens", "idem_outbox", "idem_outbox_parts", "idem_outbox_repairs", "idem_dead_letters", "idem_effects", "idem_sagas", "idem_saga_resolutions",
		"idem_stream_events", "idem_stream_heads", "idem_stream_clients", "idem_sequences", "idem_hilo"},
}

func handle(t *testing.T, driver, dsn string) idemsql.TxDB[*sql.Tx] {
	t.Helper()
	db, err := sql.Open(driver, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	tdb, err := idemsql.SQLDB(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	return tdb
}

func exec(t *testing.T, db idemsql.TxDB[*sql.Tx], stmt string) error {
	t.Helper()
	return db.InTx(context.Background(), func(tx *sql.Tx) error {
		_, err := db.Querier(tx).Exec(context.Background(), stmt)
		return err
	})
}

// execScript applies a printed script as psql, sqlite3 or mysql would: MySQL's
// driver takes one statement at a time.
func execScript(t *testing.T, d idemsql.Dialect, db idemsql.TxDB[*sql.Tx], script string) error {
	t.Helper()
	if d != idemsql.MySQL {
		return exec(t, db, script)
	}
	for _, stmt := range migrate.Statements(script) {
		if err := exec(t, db, stmt); err != nil {
			return fmt.Errorf("%w in %s", err, stmt)
		}
	}
	return nil
}

func tableExists(t *testing.T, db idemsql.TxDB[*sql.Tx], table string) bool {
	t.Helper()
	return exec(t, db, "SELECT 1 FROM "+table+" LIMIT 1") == nil
}

// Up on an empty database creates every table, records every version, and a second
// Up changes nothing.
func TestUpCreatesEverySetOnce(t *testing.T) {
	t.Parallel()
	forEachDB(t, func(t *testing.T, d idemsql.Dialect, open opener) {
		ctx := context.Background()
		db := open(t)
		all := migrate.All(d)
		if err := migrate.Require(ctx, db, all...); !errors.Is(err, migrate.ErrBehind) {
			t.Fatalf("Require on an empty database = %v, want ErrBehind", err)
		}
		for range 2 {
			if err := migrate.Up(ctx, db, all...); err != nil {
				t.Fatal(err)
			}
		}
		for _, table := range tables[d] {
			if !tableExists(t, db, table) {
				t.Errorf("%s: table %s missing after Up", d, table)
			}
		}
		states, err := migrate.Status(ctx, db, all...)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range states {
			if s.Applied != s.Newest || len(s.Pending()) != 0 {
				t.Errorf("%s after Up: applied %d of %d", s.Set, s.Applied, s.Newest)
			}
		}
		var rows int
		if err := db.InTx(ctx, func(tx *sql.Tx) error {
			return tx.QueryRow(`SELECT COUNT(*) FROM idem_migrations`).Scan(&rows)
		}); err != nil {
			t.Fatal(err)
		}
		want := 0
		for _, s := range states {
			want += len(s.Steps)
		}
		if rows != want {
			t.Errorf("idem_migrations has %d rows after two Ups, want %d (one per migration)", rows, want)
		}
		if err := migrate.Require(ctx, db, all...); err != nil {
			t.Errorf("Require after Up: %v", err)
		}
	})
}

// Eight processes migrating one new database at once all succeed, and each
// migration is applied exactly once.
func TestConcurrentUp(t *testing.T) {
	t.Parallel()
	forEachDB(t, func(t *testing.T, d idemsql.Dialect, open opener) {
		const n = 8
		dbs := make([]idemsql.TxDB[*sql.Tx], n)
		for i := range dbs {
			dbs[i] = open(t)
		}
		var wg sync.WaitGroup
		errs := make([]error, n)
		for i, db := range dbs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[i] = migrate.Up(context.Background(), db, migrate.All(d)...)
			}()
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			t.Fatalf("concurrent Up: %v", err)
		}
		var dup int
		if err := dbs[0].InTx(context.Background(), func(tx *sql.Tx) error {
			return tx.QueryRow(`SELECT COUNT(*) FROM (SELECT component, version FROM idem_migrations GROUP BY component, version HAVING COUNT(*) > 1) x`).Scan(&dup)
		}); err != nil || dup != 0 {
			t.Fatalf("migrations recorded twice: %d (%v)", dup, err)
		}
	})
}

// Down rolls back one step at a time, newest first, and Up brings it back.
func TestDownOneStep(t *testing.T) {
	t.Parallel()
	forEachDB(t, func(t *testing.T, d idemsql.Dialect, open opener) {
		ctx := context.Background()
		db := open(t)
		set := migrate.Records(migrate.DefaultRecordsTable)
		sets := []migrate.Set{set}
		if d != idemsql.MySQL {
			sets = append(sets, migrate.Outbox)
		}
		if err := migrate.Up(ctx, db, sets...); err != nil {
			t.Fatal(err)
		}
		steps, err := migrate.Steps(d, set)
		if err != nil {
			t.Fatal(err)
		}
		for i := len(steps) - 1; i >= 0; i-- {
			rolled, ok, err := migrate.Down(ctx, db, set)
			if err != nil || !ok || rolled.Version != steps[i].Version {
				t.Fatalf("Down = %v %v %v, want version %d rolled back", rolled.Name, ok, err, steps[i].Version)
			}
			states, err := migrate.Status(ctx, db, set)
			if err != nil || states[0].Applied != steps[i].Version-1 {
				t.Fatalf("after rolling back %s: applied %+v (%v)", rolled.Name, states, err)
			}
		}
		if tableExists(t, db, "idem_records") {
			t.Error("idem_records still there after rolling back every step")
		}
		if d != idemsql.MySQL && !tableExists(t, db, "idem_outbox") {
			t.Error("rolling back records dropped the outbox")
		}
		if _, ok, err := migrate.Down(ctx, db, set); ok || err != nil {
			t.Errorf("Down with nothing applied = %v, %v; want nothing done", ok, err)
		}
		if err := migrate.Up(ctx, db, set); err != nil || !tableExists(t, db, "idem_records") {
			t.Fatalf("Up after Down: %v", err)
		}
	})
}

// The printed script brings an empty database to the state Require accepts, can
// be applied twice, and its down script removes everything again.
func TestScriptIsWhatRequireChecks(t *testing.T) {
	t.Parallel()
	forEachDB(t, func(t *testing.T, d idemsql.Dialect, open opener) {
		ctx := context.Background()
		db := open(t)
		all := migrate.All(d)
		up, err := migrate.Script(d, false, all...)
		if err != nil {
			t.Fatal(err)
		}
		for range 2 {
			if err := execScript(t, d, db, up); err != nil {
				t.Fatalf("applying the printed script: %v", err)
			}
		}
		if err := migrate.Require(ctx, db, all...); err != nil {
			t.Fatalf("Require after the printed script: %v", err)
		}
		down, err := migrate.Script(d, true, all...)
		if err != nil {
			t.Fatal(err)
		}
		if err := execScript(t, d, db, down); err != nil {
			t.Fatalf("applying the printed down script: %v", err)
		}
		for _, table := range tables[d] {
			if tableExists(t, db, table) {
				t.Errorf("%s still there after the down script", table)
			}
		}
		err = migrate.Require(ctx, db, all...)
		var be *migrate.BehindError
		if !errors.As(err, &be) || be.Applied != 0 || be.Missing == "" {
			t.Fatalf("Require after the down script = %v, want a BehindError at version 0", err)
		}
	})
}

// A records table under another name gets its own line of versions, beside the
// default one; names that are not safe identifiers, or other names for tables with
// fixed names, are refused by field.
func TestCustomNames(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cs, _ := testsvc.PostgresSchema(t)
	db := handle(t, "pgx", cs)
	custom := migrate.Records("orders_keys")
	if err := migrate.Up(ctx, db, migrate.Records(migrate.DefaultRecordsTable), custom); err != nil {
		t.Fatal(err)
	}
	if err := exec(t, db, `SELECT orders_keys_claim('s', 'k', NULL, 1000, 1000)`); err != nil {
		t.Fatalf("the custom table's claim function: %v", err)
	}
	if _, _, err := migrate.Down(ctx, db, custom); err != nil {
		t.Fatal(err)
	}
	states, err := migrate.Status(ctx, db, migrate.Records(migrate.DefaultRecordsTable), custom)
	if err != nil || states[0].Applied != states[0].Newest || states[1].Applied != states[1].Newest-1 {
		t.Fatalf("rolling back the custom table moved the default one: %+v %v", states, err)
	}
	for _, tc := range []struct {
		d   idemsql.Dialect
		set migrate.Set
	}{
		{idemsql.Postgres, migrate.Records(`x"; DROP TABLE y; --`)},
		{idemsql.Postgres, migrate.Records("Upper")},
		{idemsql.Postgres, migrate.Records("")},
		{idemsql.SQLite, migrate.Records("orders_keys")},
		{idemsql.Postgres, migrate.Set{Component: "outbox", Name: "my_outbox"}},
		{idemsql.Postgres, migrate.Set{Component: "nope", Name: "idem_nope"}},
	} {
		_, err := migrate.Script(tc.d, false, tc.set)
		var ie *idem.InputError
		if !errors.As(err, &ie) {
			t.Errorf("Script(%s, %v) = %v, want an InputError", tc.d, tc.set, err)
		}
	}
}

// An idemsqlite file from before this package keeps its records (version 1 is not
// applied again) and its bookkeeping table takes the shared shape.
func TestSQLiteFirstShapeUpgrades(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := handle(t, "sqlite", "file:"+filepath.Join(t.TempDir(), "old.db")+"?_pragma=busy_timeout(10000)")
	steps, err := migrate.Steps(idemsql.SQLite, migrate.Records(migrate.DefaultRecordsTable))
	if err != nil {
		t.Fatal(err)
	}
	for _, stmt := range []string{
		`CREATE TABLE idem_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_ns INTEGER NOT NULL)`,
		steps[0].Up,
		`INSERT INTO idem_records (scope, id, state, token, retention_ns, created_ns, expires_ns) VALUES ('s', 'k', 2, 7, 0, 0, 0)`,
		fmt.Sprintf(`INSERT INTO idem_migrations VALUES (1, '0001_init.sql', %d)`, int64(1_700_000_000_000_000_000)),
	} {
		if err := exec(t, db, stmt); err != nil {
			t.Fatal(err)
		}
	}
	if err := migrate.Require(ctx, db, migrate.Records(migrate.DefaultRecordsTable)); err != nil {
		t.Fatalf("Require on the first shape: %v", err)
	}
	if err := migrate.Up(ctx, db, migrate.All(idemsql.SQLite)...); err != nil {
		t.Fatal(err)
	}
	var n int
	var name, at string
	if err := db.InTx(ctx, func(tx *sql.Tx) error {
		if err := tx.QueryRow(`SELECT COUNT(*) FROM idem_records`).Scan(&n); err != nil {
			return err
		}
		return tx.QueryRow(`SELECT name, applied_at FROM idem_migrations WHERE component = 'idem_records' AND version = 1`).Scan(&name, &at)
	}); err != nil {
		t.Fatal(err)
	}
	if n != 1 || name != "001_records" || at[:4] != "2023" {
		t.Fatalf("after the upgrade: %d records, version 1 named %q applied %q; want the record kept, 001_records, 2023", n, name, at)
	}
}

// A constructor restarted on a SQLite file whose write lock another connection
// holds finds its schema current without waiting for that lock (Up reads the
// versions outside any transaction first); only pending work takes the lock.
func TestUpToDateTakesNoLock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := "file:" + filepath.Join(t.TempDir(), "busy.db") + "?_pragma=journal_mode(WAL)&_pragma=busy_timeout(50)"
	db := handle(t, "sqlite", dsn)
	if err := migrate.Up(ctx, db, migrate.Outbox); err != nil {
		t.Fatal(err)
	}
	writer, err := sql.Open("sqlite", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer writer.Close()
	conn, err := writer.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		t.Fatal(err)
	}
	defer conn.ExecContext(ctx, "ROLLBACK") //nolint:errcheck
	if err := migrate.Up(ctx, db, migrate.Outbox); err != nil {
		t.Fatalf("Up of a current schema while another connection holds the write lock: %v", err)
	}
}
