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
	db, err := sql.Open("sqlite", "file:"+filepath.Join(t.TempDir(), "g.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()
	g := sqlitegate.For(db)
	if sqlitegate.For(db) != g {
		t.Fatal("two gates for one *sql.DB")
	}
	tx, err := g.Begin(ctx, db, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Held: a waiter whose context ends gets its error, not the gate.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := g.Begin(cctx, db, nil); err != context.Canceled {
		t.Fatalf("Begin with the gate held and ctx done: %v, want context.Canceled", err)
	}
	_ = tx.Rollback()
	g.End(tx)
	g.End(tx) // twice: released once
	// Many goroutines, each its turn: every one gets the gate and lets it go.
	var wg sync.WaitGroup
	inside := 0
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 20 {
				tx, err := g.Begin(ctx, db, nil)
				if err != nil {
					t.Error(err)
					return
				}
				inside++ // the race detector fails this if two hold the gate at once
				if _, err := tx.Exec("SELECT 1"); err != nil {
					t.Error(err)
				}
				_ = tx.Commit()
				g.End(tx)
			}
		}()
	}
	wg.Wait()
	if inside != 160 {
		t.Fatalf("%d turns, want 160", inside)
	}
}
