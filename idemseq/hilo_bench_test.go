package idemseq_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"runtime"
	"sync/atomic"
	"testing"

	"github.com/idemhq/idem/idemmysql"
	"github.com/idemhq/idem/idempg"
	"github.com/idemhq/idem/idemseq"
	"github.com/idemhq/idem/idemsqlite"
	"github.com/idemhq/idem/internal/testsvc"
)

// hiloBenchClients is the number of goroutines asking for ids in the database
// benchmarks, as many as the pool has connections.
const hiloBenchClients = 16

// BenchmarkHiLoNext is the in-memory cost of an id: a mutex and a counter, plus one
// fake NextBlock per 1,000 ids, with every core asking at once.
func BenchmarkHiLoNext(b *testing.B) {
	var calls atomic.Uint64
	h := idemseq.NewHiLo(hiloCounter(1000, &calls))
	ctx := context.Background()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := h.Next(ctx); err != nil {
				b.Error(err)
				return
			}
		}
	})
	hiloReport(b, calls.Load())
}

// BenchmarkHiLoPostgres allocates ids from one Postgres sequence with 16 clients.
// The baseline is what HiLo replaces: every client calls nextval for every id
// (NextBlock of a sequence of block 1, no HiLo); block=1000 is one HiLo shared by
// the 16 clients.
func BenchmarkHiLoPostgres(b *testing.B) {
	for _, bb := range hiloBenchCases {
		b.Run(bb.name, func(b *testing.B) {
			cs, _ := testsvc.PostgresSchema(b)
			hiloBenchDB(b, "pgx", cs, bb.block, idempg.HiLoSequence)
		})
	}
}

// BenchmarkHiLoSQLite is BenchmarkHiLoPostgres on a SQLite file (WAL,
// synchronous=FULL): the baseline pays a commit, and its fsync, per id.
func BenchmarkHiLoSQLite(b *testing.B) {
	for _, bb := range hiloBenchCases {
		b.Run(bb.name, func(b *testing.B) {
			dsn := "file:" + filepath.Join(b.TempDir(), "ids.db") +
				"?_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)&_pragma=busy_timeout(10000)&_txlock=immediate"
			hiloBenchDB(b, "sqlite", dsn, bb.block, idemsqlite.HiLoTable)
		})
	}
}

// BenchmarkHiLoMySQL is BenchmarkHiLoPostgres on a MySQL/MariaDB table: the
// baseline pays an InnoDB commit per id.
func BenchmarkHiLoMySQL(b *testing.B) {
	for _, bb := range hiloBenchCases {
		b.Run(bb.name, func(b *testing.B) {
			dsn, err := idemmysql.DSN(testsvc.MySQLDatabase(b))
			if err != nil {
				b.Fatal(err)
			}
			hiloBenchDB(b, "mysql", dsn, bb.block, idemmysql.HiLoTable)
		})
	}
}

// A block of 1 means the baseline: NextBlock per id from every client, no HiLo.
var hiloBenchCases = []struct {
	name  string
	block uint64
}{{"baseline=round-trip-per-id", 1}, {"block=1000", 1000}}

type hiloOpener func(ctx context.Context, db *sql.DB, name string, block uint64) (idemseq.BlockSource, error)

func hiloBenchDB(b *testing.B, driver, dsn string, block uint64, open hiloOpener) {
	ctx := context.Background()
	db, err := sql.Open(driver, dsn)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { db.Close() })
	db.SetMaxOpenConns(hiloBenchClients)
	db.SetMaxIdleConns(hiloBenchClients)
	src, err := open(ctx, db, "bench_ids", block)
	if err != nil {
		b.Fatal(err)
	}
	var calls atomic.Uint64
	counted := hiloCounting{src, &calls}
	next := idemseq.NewHiLo(counted).Next
	if block == 1 {
		next = counted.NextBlock
	}
	if _, err := next(ctx); err != nil { // prepare the statement before the clock starts
		b.Fatal(err)
	}
	calls.Store(0)
	b.SetParallelism((hiloBenchClients + runtime.GOMAXPROCS(0) - 1) / runtime.GOMAXPROCS(0))
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := next(ctx); err != nil {
				b.Error(err)
				return
			}
		}
	})
	hiloReport(b, calls.Load())
}

// hiloReport adds ids/s and round trips per id, the two figures HiLo trades.
func hiloReport(b *testing.B, calls uint64) {
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ids/s")
	b.ReportMetric(float64(calls)/float64(b.N), "roundtrips/id")
}
