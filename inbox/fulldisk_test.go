package inbox_test

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemsqlite"
	"github.com/idemhq/idem/inbox"
	"github.com/idemhq/idem/internal/testsvc"
)

// settleLog records how each delivery was settled.
type settleLog struct {
	mu         sync.Mutex
	acks, naks map[string]int
}

type logSettler struct {
	log *settleLog
	id  string
}

func (s logSettler) Ack(context.Context) error {
	s.log.mu.Lock()
	defer s.log.mu.Unlock()
	s.log.acks[s.id]++
	return nil
}

func (s logSettler) Nak(context.Context, time.Duration) error {
	s.log.mu.Lock()
	defer s.log.mu.Unlock()
	s.log.naks[s.id]++
	return nil
}

// TestFullDiskSQLite delivers messages to an inbox on SQLite while its disk fills:
// a message whose effect and key could not be stored must not be acked (the broker
// redelivers it), and once space returns every message, redelivered, is applied
// exactly once, by the same consumer, without a restart.
func TestFullDiskSQLite(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	disk := testsvc.NewSmallDisk(t, 2<<20)
	store, err := idemsqlite.Open(ctx, filepath.Join(disk.Dir, "inbox.db"), idemsqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	db := store.DB()
	// No unique constraint: a message applied twice would leave two rows.
	if _, err := db.ExecContext(ctx, "CREATE TABLE ledger (msg_id TEXT NOT NULL, body BLOB)"); err != nil {
		t.Fatal(err)
	}
	credit := func(ctx context.Context, tx *sql.Tx, m idem.Message) error {
		_, err := tx.ExecContext(ctx, "INSERT INTO ledger (msg_id, body) VALUES (?, ?)", m.ID, m.Payload)
		return err
	}
	c, err := inbox.New(ctx, nopSource{}, idemsqlite.TxDB(db), store, credit, inbox.Config{Consumer: "fulldisk", BatchSize: 4})
	if err != nil {
		t.Fatal(err)
	}
	log := &settleLog{acks: map[string]int{}, naks: map[string]int{}}
	deliver := func(ids []string, attempt int) {
		ds := make([]idem.Delivery, len(ids))
		for i, id := range ids {
			ds[i] = idem.Delivery{Message: idem.Message{ID: id, Topic: "credits", Payload: bytes.Repeat([]byte("x"), 1024)},
				Attempt: attempt, Settler: logSettler{log, id}}
		}
		c.Process(ctx, ds)
	}

	disk.FillLeaving(t, 256<<10)
	var sent []string
	for b, inARow := 0, 0; inARow < 5; b++ {
		if b == 10_000 {
			t.Fatal("40,000 messages fitted on the small disk: it never filled")
		}
		ids := make([]string, 4)
		for i := range ids {
			ids[i] = fmt.Sprintf("m%05d-%d", b, i)
		}
		sent = append(sent, ids...)
		deliver(ids, 1)
		if ledgerRows(t, db, ids[0]) == 0 {
			inARow++
		} else {
			inARow = 0
		}
	}

	// Each delivery was settled once: acked if its effect and key committed, naked
	// (redelivered) if not, and only acked ones left a ledger row.
	var redeliver []string
	for _, id := range sent {
		n, rows := log.count(id), ledgerRows(t, db, id)
		switch {
		case n.acks+n.naks != 1:
			t.Fatalf("%s settled %d times (acks %d, naks %d), want once", id, n.acks+n.naks, n.acks, n.naks)
		case n.acks == 1 && rows != 1, n.naks == 1 && rows != 0:
			t.Fatalf("%s: acked %d, naked %d, %d ledger rows: an ack must mean its effect was stored, a nak that it was not", id, n.acks, n.naks, rows)
		case n.naks == 1:
			redeliver = append(redeliver, id)
		}
	}
	if len(redeliver) == 0 || len(redeliver) == len(sent) {
		t.Fatalf("%d of %d messages were refused: want the disk to fill part way", len(redeliver), len(sent))
	}
	t.Logf("%d messages applied before the disk filled, %d refused and naked", len(sent)-len(redeliver), len(redeliver))

	disk.Free(t) // space returns; the broker redelivers every message (the applied ones as duplicates)
	for i := 0; i < len(sent); i += 4 {
		deliver(sent[i:min(i+4, len(sent))], 2)
	}
	for _, id := range sent {
		if n, rows := log.count(id), ledgerRows(t, db, id); n.acks == 0 || rows != 1 {
			t.Fatalf("%s after space returned: acked %d times, %d ledger rows; want acked (a duplicate is acked too) and applied once", id, n.acks, rows)
		}
	}
}

type settled struct{ acks, naks int }

func (l *settleLog) count(id string) settled {
	l.mu.Lock()
	defer l.mu.Unlock()
	return settled{l.acks[id], l.naks[id]}
}
