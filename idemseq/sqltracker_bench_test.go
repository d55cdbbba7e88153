package idemseq_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"

	"github.com/idemhq/idem/idemseq"
	"github.com/idemhq/idem/internal/testsvc"
)

// BenchmarkSQLTrackerCheck is one Check of the SQL tracker, in a transaction of its
// own, on each database: a producer's next number (a locking read and an update)
// and a number already seen (the locking read alone).
func BenchmarkSQLTrackerCheck(b *testing.B) {
	dbs := []struct {
		name string
		open func(b *testing.B) *sql.DB
	}{
		{"sqlite", func(b *testing.B) *sql.DB {
			db, err := sql.Open("sqlite", "file:"+filepath.Join(b.TempDir(), "seq.db")+
				"?_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)&_pragma=busy_timeout(10000)&_txlock=immediate")
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { db.Close() })
			return db
		}},
		{"postgres", func(b *testing.B) *sql.DB { return testsvc.PostgresDB(b) }},
		{"mysql", func(b *testing.B) *sql.DB { return testsvc.MySQLDB(b) }},
	}
	for _, d := range dbs {
		for _, c := range []struct {
			name string
			seq  func(i uint64) uint64
		}{{"next", func(i uint64) uint64 { return i + 1 }}, {"duplicate", func(uint64) uint64 { return 1 }}} {
			b.Run(d.name+"/"+c.name, func(b *testing.B) {
				ctx := context.Background()
				tr, err := idemseq.OpenSQL(ctx, d.open(b), idemseq.Config{})
				if err != nil {
					b.Fatal(err)
				}
				b.ReportAllocs()
				var i uint64
				for b.Loop() {
					if _, err := tr.Check(ctx, "bench", 1, c.seq(i)); err != nil {
						b.Fatal(err)
					}
					i++
				}
			})
		}
	}
}
