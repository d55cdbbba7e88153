package sqlitegate_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"sync"
	"testing"

	"github.com/idemhq/idem/internal/sqlitegate"
	_ "modernc.org/sqlite"
)

func TestGate(t *testing.T) {
	db, err := sql.Open("sqlite", "file:"+filepath.Join(t.TempDir(), "g.db")+"?_txlock=immediate&_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()
	g := sqlitegate.For(db)
	if sqlitegate.For(db) != g {
		t.Fatal("two gates for one *sql.DB")
	}
	// A transaction ended behind the gate's back (tx.Commit, not through a TxDB)
	// keeps nothing: the gate is held only while BEGIN waits.
	tx, err := g.Begin(ctx, db, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	// Held by a BEGIN that waits: a waiter whose context ends gets its error.
	inside, release := make(chan struct{}), make(chan struct{})
	go g.Do(ctx, func() error { close(inside); <-release; return nil }) //nolint:errcheck // the test's own hold
	<-inside
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := g.Begin(cctx, db, nil); err != context.Canceled {
		t.Fatalf("Begin with the gate held and ctx done: %v, want context.Canceled", err)
	}
	close(release)
	// Many goroutines, each a write transaction: every one gets its turn.
	if _, err := db.Exec("CREATE TABLE n (v INTEGER)"); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 20 {
				tx, err := g.Begin(ctx, db, nil)
				if err != nil {
					t.Error(err)
					return
				}
				if _, err := tx.Exec("INSERT INTO n VALUES (1)"); err != nil {
					t.Error(err)
				}
				if err := tx.Commit(); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	var n int
	if err := db.QueryRow("SELECT COUNT(*) FROM n").Scan(&n); err != nil || n != 160 {
		t.Fatalf("%d rows, %v; want 160", n, err)
	}
}
