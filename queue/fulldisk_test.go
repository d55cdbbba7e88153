package queue_test

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemsqlite"
	"github.com/idemhq/idem/inbox"
	"github.com/idemhq/idem/internal/testsvc"
	"github.com/idemhq/idem/queue"
)

// TestFullDiskSQLite runs the database as the queue on SQLite while its disk fills:
// producers enqueue jobs in their business transactions and a consumer (the inbox
// over a queue.Source) applies them, until the disk refuses the producers. A job
// whose transaction failed is never applied; every job that committed is applied
// exactly once, by the same consumer, after space returns.
func TestFullDiskSQLite(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), waitLong)
	defer cancel()
	disk := testsvc.NewSmallDisk(t, 2<<20)
	store, err := idemsqlite.Open(ctx, filepath.Join(disk.Dir, "queue.db"), idemsqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	d := &database{kind: "sqlite", db: store.DB(), tx: idemsqlite.TxDB(store.DB()), store: store}
	// No unique constraint: a job applied twice would leave two rows.
	d.exec(t, "CREATE TABLE orders (id TEXT NOT NULL)")
	d.exec(t, "CREATE TABLE shipped (id TEXT NOT NULL)")
	q := newQueue(t, d, queue.Config{})
	src := newSource(t, q, queue.SourceConfig{Topic: "ship"})
	ship := func(ctx context.Context, tx *sql.Tx, m idem.Message) error {
		_, err := tx.ExecContext(ctx, "INSERT INTO shipped (id) VALUES (?)", m.ID)
		return err
	}
	con, err := inbox.New(ctx, src, d.tx, d.store, ship, inbox.Config{Consumer: "shipper", Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() { ran <- con.Run(runCtx) }()
	defer func() {
		stop()
		<-ran
	}()

	order := func(id string) error {
		tx, err := d.db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback()
		if _, err := tx.ExecContext(ctx, "INSERT INTO orders (id) VALUES (?)", id); err != nil {
			return err
		}
		if _, err := q.EnqueueTx(ctx, tx, idem.Message{ID: id, Topic: "ship", Payload: []byte(strings.Repeat("x", 512))}); err != nil {
			return err
		}
		return tx.Commit()
	}
	disk.FillLeaving(t, 256<<10)
	var acked, refused []string
	for i, inARow := 0, 0; inARow < 10; i++ {
		if i == 100_000 {
			t.Fatal("100,000 jobs fitted on the small disk: it never filled")
		}
		id := fmt.Sprintf("j%06d", i)
		if err := order(id); err != nil {
			if !strings.Contains(err.Error(), "full") {
				t.Fatalf("job %s on a full disk: %v; want an error that says the disk is full", id, err)
			}
			refused = append(refused, id)
			inARow++
			continue
		}
		acked = append(acked, id)
		inARow = 0
	}
	if len(acked) == 0 {
		t.Fatal("no job committed before the disk filled: the ballast left no room")
	}
	t.Logf("%d jobs committed, %d refused; %d applied before space returned",
		len(acked), len(refused), d.count(t, "SELECT COUNT(*) FROM shipped"))

	disk.Free(t)
	eventually(t, "every committed job applied", func() bool {
		return d.count(t, "SELECT COUNT(*) FROM shipped") >= len(acked)
	})
	for _, id := range acked {
		if n := d.count(t, "SELECT COUNT(*) FROM shipped WHERE id = ?", id); n != 1 {
			t.Fatalf("committed job %s applied %d times, want once", id, n)
		}
	}
	for _, id := range refused {
		if n := d.count(t, "SELECT COUNT(*) FROM shipped WHERE id = ?", id); n != 0 {
			t.Fatalf("refused job %s (its transaction failed) was applied %d times", id, n)
		}
	}
}
