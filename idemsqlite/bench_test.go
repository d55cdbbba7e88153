package idemsqlite_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sync/atomic"
	"testing"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemsqlite"
)

// Claims on fresh keys, so every claim writes a record; with SyncFull every commit
// fsyncs the WAL. Compare claims/s with BenchmarkFsync's fsyncs/s: a store without
// group commit cannot claim faster than the disk syncs (see BenchmarkRawInsertOnConflict).

const benchGoroutines = 64

func benchClaims(b *testing.B, cfg idemsqlite.Config, goroutines int) {
	s, _ := openStore(b, cfg)
	ctx := context.Background()
	var seq atomic.Int64
	claim := func() {
		k := idem.Key{Scope: "bench", ID: fmt.Sprint(seq.Add(1))}
		if res, err := s.Claim(ctx, idem.Claim{Key: k}); err != nil || res.Outcome != idem.Acquired {
			b.Errorf("Claim = %v, %v", res.Outcome, err)
		}
	}
	b.ResetTimer()
	if goroutines == 1 {
		for b.Loop() {
			claim()
		}
	} else {
		b.SetParallelism(max(1, goroutines/runtime.GOMAXPROCS(0)))
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				claim()
			}
		})
	}
	reportRate(b, b.N, "claims/s")
	if st := s.Stats(); st.Commits > 0 {
		b.ReportMetric(float64(st.Ops)/float64(st.Commits), "ops/commit")
	}
}

func reportRate(b *testing.B, n int, unit string) {
	if sec := b.Elapsed().Seconds(); sec > 0 {
		b.ReportMetric(float64(n)/sec, unit)
	}
}

// BenchmarkClaimConcurrent: 64 goroutines claiming, durable commits (group commit).
func BenchmarkClaimConcurrent(b *testing.B) {
	benchClaims(b, idemsqlite.Config{}, benchGoroutines)
}

// BenchmarkClaimConcurrentSyncNormal: as above without the fsync at commit.
func BenchmarkClaimConcurrentSyncNormal(b *testing.B) {
	benchClaims(b, idemsqlite.Config{Synchronous: idemsqlite.SyncNormal}, benchGoroutines)
}

// BenchmarkClaimSingle: one goroutine, so one claim per commit: bounded by fsyncs/s.
func BenchmarkClaimSingle(b *testing.B) {
	benchClaims(b, idemsqlite.Config{}, 1)
}

// BenchmarkClaimBatch: one goroutine claiming 100 fresh keys per ClaimBatch call.
func BenchmarkClaimBatch(b *testing.B) {
	const size = 100
	s, _ := openStore(b, idemsqlite.Config{})
	ctx := context.Background()
	claims := make([]idem.Claim, size)
	i := 0
	for b.Loop() {
		for j := range claims {
			i++
			claims[j] = idem.Claim{Key: idem.Key{Scope: "bench", ID: fmt.Sprint(i)}}
		}
		if _, err := s.ClaimBatch(ctx, claims); err != nil {
			b.Fatal(err)
		}
	}
	reportRate(b, b.N*size, "claims/s")
}

// BenchmarkFsync is the disk's baseline: overwrite one 4 KiB page and fsync, as a WAL
// commit does once the WAL file has reached its steady size; and append-and-fsync,
// which also syncs the file's growing size.
func BenchmarkFsync(b *testing.B) {
	page := make([]byte, 4096)
	for _, mode := range []string{"overwrite", "append"} {
		b.Run(mode, func(b *testing.B) {
			f, err := os.Create(filepath.Join(b.TempDir(), "fsync"))
			if err != nil {
				b.Fatal(err)
			}
			defer f.Close()
			var off int64
			for b.Loop() {
				if _, err := f.WriteAt(page, off); err != nil {
					b.Fatal(err)
				}
				if mode == "append" {
					off += int64(len(page))
				}
				if err := f.Sync(); err != nil {
					b.Fatal(err)
				}
			}
			reportRate(b, b.N, "fsyncs/s")
		})
	}
}

// BenchmarkRawInsertOnConflict is what a store without group commit does: one
// INSERT … ON CONFLICT DO NOTHING per transaction on one connection, same pragmas.
func BenchmarkRawInsertOnConflict(b *testing.B) {
	path := filepath.Join(b.TempDir(), "raw.db")
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)"+
		"&_pragma=busy_timeout(10000)&_pragma=foreign_keys(1)&_txlock=immediate")
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	ctx := context.Background()
	if _, err := db.ExecContext(ctx, `CREATE TABLE records (scope TEXT NOT NULL, id TEXT NOT NULL,
		token INTEGER NOT NULL, expires_ns INTEGER NOT NULL, PRIMARY KEY (scope, id)) WITHOUT ROWID`); err != nil {
		b.Fatal(err)
	}
	i := 0
	for b.Loop() {
		i++
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO records (scope, id, token, expires_ns) VALUES (?, ?, ?, ?)
			ON CONFLICT DO NOTHING`, "bench", fmt.Sprint(i), i, i); err != nil {
			b.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			b.Fatal(err)
		}
	}
	reportRate(b, b.N, "claims/s")
}
