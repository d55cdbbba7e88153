package idemsqlite_test

import (
	"context"
	"database/sql"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemsqlite"
	"github.com/idemhq/idem/migrate"
)

// TestBusyWriterDoesNotStarveOthers: a writer that begins its next transaction as
// soon as it commits (a consumer with its next batch in hand) held SQLite's write
// lock against everyone else in the process: SQLite's busy handler polls instead
// of queueing, so a restarted consumer's migration failed with SQLITE_BUSY after
// busy_timeout, and the Store's own calls waited behind every batch. idem's writers
// now queue in the process, in order.
func TestBusyWriterDoesNotStarveOthers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := openStore(t, idemsqlite.Config{BusyTimeout: 2 * time.Second})
	db := s.DB()
	if _, err := db.Exec("CREATE TABLE ledger (n INTEGER)"); err != nil {
		t.Fatal(err)
	}
	txdb := idemsqlite.TxDB(db)
	var commits atomic.Int64
	started := make(chan struct{})
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			err := txdb.InTx(ctx, func(tx *sql.Tx) error {
				if _, err := tx.ExecContext(ctx, "INSERT INTO ledger (n) VALUES (1)"); err != nil {
					return err
				}
				time.Sleep(5 * time.Millisecond) // a batch's work, the lock held
				return nil
			})
			if err != nil {
				t.Errorf("the busy writer: %v", err)
				return
			}
			if commits.Add(1) == 3 {
				close(started)
			}
		}
	}()
	defer func() { close(stop); wg.Wait() }()
	<-started // by progress: the writer is in its loop

	for range 3 { // a consumer restarted while the writer runs: its migration takes the lock
		if _, _, err := migrate.Down(ctx, txdb, migrate.Inbox); err != nil {
			t.Fatalf("migrate down beside a busy writer: %v", err)
		}
		if err := migrate.Up(ctx, txdb, migrate.Inbox); err != nil {
			t.Fatalf("migrate up beside a busy writer: %v", err)
		}
	}
	// The Store's group-commit writer queues in the same line.
	k := idem.Key{Scope: "s", ID: "starve"}
	r, err := s.Claim(ctx, idem.Claim{Key: k, Lease: time.Minute})
	if err != nil {
		t.Fatalf("claim beside a busy writer: %v", err)
	}
	if err := s.Complete(ctx, k, r.Token, []byte("ok")); err != nil {
		t.Fatalf("complete beside a busy writer: %v", err)
	}
}
