package idemseq_test

import (
	"context"
	"database/sql"
	"errors"
	"math"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemmysql"
	"github.com/idemhq/idem/idempg"
	"github.com/idemhq/idem/idemseq"
	"github.com/idemhq/idem/idemsqlite"
	"github.com/idemhq/idem/internal/testsvc"
)

// hiloBackend is one durable BlockSource under test: the same tests run on each.
type hiloBackend struct {
	name string
	// database makes a fresh database for t and returns a func that opens a new
	// handle on it: its own connection pool, as a separate process would have.
	database func(t *testing.T) (newDB func() *sql.DB)
	source   func(ctx context.Context, db *sql.DB, name string, block uint64) (idemseq.BlockSource, error)
	// moveTo makes the next block of the named source start at first.
	moveTo func(ctx context.Context, db *sql.DB, name string, block uint64, first int64) error
}

var hiloBackends = []hiloBackend{
	{
		name: "postgres",
		database: func(t *testing.T) func() *sql.DB {
			cs, _ := testsvc.PostgresSchema(t)
			return func() *sql.DB { return hiloOpen(t, "pgx", cs) }
		},
		source: idempg.HiLoSequence,
		moveTo: func(ctx context.Context, db *sql.DB, name string, block uint64, first int64) error {
			_, err := db.ExecContext(ctx, "SELECT setval($1, $2)", name, first-int64(block))
			return err
		},
	},
	{
		name: "sqlite",
		database: func(t *testing.T) func() *sql.DB {
			dsn := "file:" + filepath.Join(t.TempDir(), "ids.db") +
				"?_pragma=journal_mode(WAL)&_pragma=busy_timeout(10000)&_txlock=immediate"
			return func() *sql.DB { return hiloOpen(t, "sqlite", dsn) }
		},
		source: idemsqlite.HiLoTable,
		moveTo: func(ctx context.Context, db *sql.DB, name string, _ uint64, first int64) error {
			_, err := db.ExecContext(ctx, "UPDATE idem_hilo SET next = ?1 WHERE name = ?2", first, name)
			return err
		},
	},
	{
		name: "mysql",
		database: func(t *testing.T) func() *sql.DB {
			dsn, err := idemmysql.DSN(testsvc.MySQLDatabase(t))
			if err != nil {
				t.Fatal(err)
			}
			return func() *sql.DB { return hiloOpen(t, "mysql", dsn) }
		},
		source: idemmysql.HiLoTable,
		moveTo: func(ctx context.Context, db *sql.DB, name string, _ uint64, first int64) error {
			_, err := db.ExecContext(ctx, "UPDATE idem_hilo SET next = ? WHERE name = ?", first, name)
			return err
		},
	},
}

func hiloOpen(t *testing.T, driver, dsn string) *sql.DB {
	db, err := sql.Open(driver, dsn)
	if err != nil {
		t.Fatalf("sql.Open(%s): %v", driver, err)
	}
	db.SetMaxOpenConns(2) // 8 "processes" per test, many tests in parallel, one Postgres or MySQL
	t.Cleanup(func() { db.Close() })
	return db
}

// hiloEach runs test as a parallel subtest per backend.
func hiloEach(t *testing.T, test func(t *testing.T, b hiloBackend)) {
	t.Parallel()
	for _, b := range hiloBackends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			test(t, b)
		})
	}
}

// hiloCounting counts the round trips of the source it wraps.
type hiloCounting struct {
	idemseq.BlockSource
	calls *atomic.Uint64
}

func (c hiloCounting) NextBlock(ctx context.Context) (uint64, error) {
	c.calls.Add(1)
	return c.BlockSource.NextBlock(ctx)
}

// Eight processes' worth of HiLos (8 handles, each with its own pool and its own
// HiLo, opened at the same moment) and 8 goroutines on each allocate 128,000 ids
// from one source: no id twice, and one round trip per block plus at most one
// abandoned partial block per HiLo.
func TestHiLoProcesses(t *testing.T) {
	hiloEach(t, func(t *testing.T, b hiloBackend) {
		const procs, goroutines, each, block = 8, 8, 2000, 100
		ctx := hiloCtx(t)
		newDB := b.database(t)
		var rounds atomic.Uint64
		hilos := make([]*idemseq.HiLo, procs)
		var wg sync.WaitGroup
		for p := range hilos {
			db := newDB()
			wg.Go(func() { // concurrent opens race to create the sequence or row
				src, err := b.source(ctx, db, "order_ids", block)
				if err != nil {
					t.Errorf("open process %d: %v", p, err)
					return
				}
				hilos[p] = idemseq.NewHiLo(hiloCounting{src, &rounds})
			})
		}
		wg.Wait()
		if t.Failed() {
			return
		}
		var nexts []func(context.Context) (uint64, error)
		for _, h := range hilos {
			for range goroutines {
				nexts = append(nexts, h.Next)
			}
		}
		seen := hiloCollect(t, each, nexts)
		ids := uint64(len(seen))
		if r := rounds.Load(); r < ids/block || r > ids/block+procs {
			t.Errorf("%d round trips for %d ids in blocks of %d, want %d to %d", r, ids, block, ids/block, ids/block+procs)
		}
		t.Logf("%d ids, %d round trips", ids, rounds.Load())
	})
}

// A process that handed out part of a block and died leaves a gap: a new process on
// the same source starts at the next block and never repeats an id of the old one.
func TestHiLoCrash(t *testing.T) {
	hiloEach(t, func(t *testing.T, b hiloBackend) {
		ctx := hiloCtx(t)
		newDB := b.database(t)
		dead := newDB()
		src, err := b.source(ctx, dead, "ids", 100)
		if err != nil {
			t.Fatal(err)
		}
		before := idemseq.NewHiLo(src)
		given := map[uint64]bool{}
		for range 30 {
			id, err := before.Next(ctx)
			if err != nil {
				t.Fatal(err)
			}
			given[id] = true
		}
		dead.Close() // the process is gone, with ids 31..100 of its block

		src, err = b.source(ctx, newDB(), "ids", 100)
		if err != nil {
			t.Fatal(err)
		}
		after := idemseq.NewHiLo(src)
		for i := range 250 {
			id, err := after.Next(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if given[id] {
				t.Fatalf("id %d handed out again after the crash", id)
			}
			if i == 0 && id != 101 {
				t.Errorf("first id after the crash = %d, want 101 (the dead block's rest is a gap)", id)
			}
		}
	})
}

// Processes must agree on the block size: a different one is refused with an
// InputError that names both sizes.
func TestHiLoBlockMismatch(t *testing.T) {
	hiloEach(t, func(t *testing.T, b hiloBackend) {
		ctx := hiloCtx(t)
		db := b.database(t)()
		if _, err := b.source(ctx, db, "ids", 100); err != nil {
			t.Fatal(err)
		}
		_, err := b.source(ctx, db, "ids", 1000)
		var ie *idem.InputError
		if !errors.As(err, &ie) || ie.Field != "block" || !strings.Contains(err.Error(), "100 ") ||
			!strings.Contains(err.Error(), "1000") || ie.Fix == "" {
			t.Fatalf("open with another block size = %v, want an InputError on block naming 100 and 1000", err)
		}
		t.Log(err)
		if _, err := b.source(ctx, db, "ids", 100); err != nil {
			t.Fatalf("reopen with the same size: %v", err)
		}
	})
}

// At the end of the id space the source refuses with ErrOutOfIDs, every time,
// instead of wrapping around or handing out a partial block.
func TestHiLoOutOfIDs(t *testing.T) {
	hiloEach(t, func(t *testing.T, b hiloBackend) {
		ctx := hiloCtx(t)
		db := b.database(t)()
		src, err := b.source(ctx, db, "ids", 100)
		if err != nil {
			t.Fatal(err)
		}
		if err := b.moveTo(ctx, db, "ids", 100, math.MaxInt64-149); err != nil {
			t.Fatal(err)
		}
		h := idemseq.NewHiLo(src)
		for range 100 {
			if id, err := h.Next(ctx); err != nil || id < math.MaxInt64-149 || id > math.MaxInt64 {
				t.Fatalf("Next = %d, %v; want an id of the last whole block", id, err)
			}
		}
		for range 2 {
			if id, err := h.Next(ctx); !errors.Is(err, idemseq.ErrOutOfIDs) || idem.IsRetryable(err) {
				t.Fatalf("Next past the end = %d, %v; want ErrOutOfIDs, not retryable", id, err)
			}
		}
	})
}

// nextval is not undone by a rollback, so a block whose nextval ran in a transaction
// that rolled back is never handed out again.
func TestHiLoPostgresRollback(t *testing.T) {
	t.Parallel()
	ctx := hiloCtx(t)
	db := hiloBackends[0].database(t)()
	src, err := idempg.HiLoSequence(ctx, db, "Order_IDs", 100) // the name folds to order_ids
	if err != nil {
		t.Fatal(err)
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var rolledBack uint64
	if err := tx.QueryRowContext(ctx, "SELECT nextval('order_ids')").Scan(&rolledBack); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	id, err := idemseq.NewHiLo(src).Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if id < rolledBack+100 {
		t.Fatalf("Next = %d after a rolled back nextval = %d; want the block after it", id, rolledBack)
	}
}

// A name already taken by a table is refused with a clear InputError.
func TestHiLoPostgresNotASequence(t *testing.T) {
	t.Parallel()
	ctx := hiloCtx(t)
	db := hiloBackends[0].database(t)()
	if _, err := db.ExecContext(ctx, "CREATE TABLE order_ids (id bigint)"); err != nil {
		t.Fatal(err)
	}
	_, err := idempg.HiLoSequence(ctx, db, "order_ids", 100)
	var ie *idem.InputError
	if !errors.As(err, &ie) || ie.Field != "name" {
		t.Fatalf("HiLoSequence on a table = %v, want an InputError on name", err)
	}
}

// Database failures are retryable BackendErrors naming the backend and operation.
func TestHiLoBackendErrors(t *testing.T) {
	t.Parallel()
	ctx := hiloCtx(t)
	for _, tc := range []struct {
		backend, driver, dsn string
		source               func(context.Context, *sql.DB, string, uint64) (idemseq.BlockSource, error)
	}{
		{"postgres", "pgx", "postgres://postgres@" + testsvc.ClosedAddr(t) + "/test?sslmode=disable&connect_timeout=5", idempg.HiLoSequence},
		{"mysql", "mysql", "root@tcp(" + testsvc.ClosedAddr(t) + ")/test?timeout=5s", idemmysql.HiLoTable},
	} {
		_, err := tc.source(ctx, hiloOpen(t, tc.driver, tc.dsn), "ids", 10)
		var be *idem.BackendError
		if !errors.As(err, &be) || be.Backend != tc.backend || be.Op != "hilo.open" || !idem.IsRetryable(err) {
			t.Errorf("open on a closed port = %v, want a retryable BackendError %s hilo.open", err, tc.backend)
		}
	}
}

// A deleted row of a table source is a final error, never a silent restart at 1;
// a closed handle is a BackendError naming the backend.
func TestHiLoTableErrors(t *testing.T) {
	hiloEach(t, func(t *testing.T, b hiloBackend) {
		if b.name == "postgres" {
			t.Skip("a Postgres source is a sequence, not a row of idem_hilo")
		}
		ctx := hiloCtx(t)
		db := b.database(t)()
		src, err := b.source(ctx, db, "ids", 10)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := db.ExecContext(ctx, "DELETE FROM idem_hilo"); err != nil {
			t.Fatal(err)
		}
		if _, err := src.NextBlock(ctx); err == nil || idem.IsRetryable(err) || !strings.Contains(err.Error(), "gone") {
			t.Errorf("NextBlock on a deleted row = %v, want a final error saying the row is gone", err)
		}
		db.Close()
		var be *idem.BackendError
		if _, err := src.NextBlock(ctx); !errors.As(err, &be) || be.Backend != b.name || be.Op != "hilo.next" {
			t.Errorf("NextBlock on a closed handle = %v, want a BackendError %s hilo.next", err, b.name)
		}
	})
}

// Names are compared as bytes in a table (as on SQLite; Postgres folds them): two
// names that differ in case are two sources.
func TestHiLoMySQLNames(t *testing.T) {
	t.Parallel()
	ctx := hiloCtx(t)
	db := hiloBackends[2].database(t)()
	upper, err := idemmysql.HiLoTable(ctx, db, "Order_IDs", 100)
	if err != nil {
		t.Fatal(err)
	}
	lower, err := idemmysql.HiLoTable(ctx, db, "order_ids", 10) // its own row, its own size
	if err != nil {
		t.Fatal(err)
	}
	for _, src := range []idemseq.BlockSource{upper, lower} {
		if first, err := src.NextBlock(ctx); err != nil || first != 1 {
			t.Fatalf("first block of a %d-id source = %d, %v; want 1", src.BlockSize(), first, err)
		}
	}
}
