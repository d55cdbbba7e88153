package queue_test

import (
	"context"
	"database/sql"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idempg"
	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/internal/testsvc"
	"github.com/idemhq/idem/queue"
)

// A commit while the Notifier reconnects sends a NOTIFY nobody hears; the Source
// claims as soon as it listens again, instead of at the next poll. Polls wait an
// hour here, and the commit comes from another Queue (no in-process wake): only
// that wake can deliver it.
func TestSourceWakesAfterRelisten(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	d := openDB(t, "postgres")
	// The consumer's database counts the statements it finished, to know its
	// first claim is over.
	var finished atomic.Int64
	cdb := d.tx
	read, commit := cdb.Read, cdb.Commit
	cdb.Read = func(ctx context.Context, fn func(idemsql.Querier) error) error {
		defer finished.Add(1)
		return read(ctx, fn)
	}
	cdb.Commit = func(ctx context.Context, tx *sql.Tx) error {
		defer finished.Add(1)
		return commit(ctx, tx)
	}
	consumer, err := queue.New(ctx, cdb, queue.Config{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	producer := newQueue(t, d, queue.Config{}) // another process, as far as the Source knows

	pool := testsvc.PostgresPool(t) // same database: NOTIFY and LISTEN are the database's
	channel := testsvc.UniqueName("relisten_")
	n := idempg.NewNotifier(pool, channel)
	t.Cleanup(n.Close)
	g := testsvc.NewGatedNotifier(n)
	src := newSource(t, consumer, queue.SourceConfig{Topic: "relisten", Notifier: g, PollInterval: time.Hour, MinPollInterval: time.Hour})

	before := finished.Load()
	got := make(chan []idem.Delivery, 1)
	go func() {
		ds, err := src.Receive(ctx, 10)
		if err != nil {
			t.Errorf("Receive: %v", err)
		}
		got <- ds
	}()
	testsvc.Eventually(t, 60*time.Second, "the Source's first claim", func() bool { return finished.Load() > before })
	testsvc.KillListener(t, ctx, pool, channel)
	select {
	case <-g.Failed():
	case <-ctx.Done():
		t.Fatal("the Source's Notifier did not see its connection fail")
	}
	if err := d.tx.InTx(ctx, func(tx *sql.Tx) error {
		_, err := producer.EnqueueTx(ctx, tx, idem.Message{ID: "in-the-gap", Topic: "relisten", Payload: []byte("x")})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	g.Release()
	ds := <-got // ctx bounds it
	if len(ds) != 1 || ds[0].Message.ID != "in-the-gap" {
		t.Fatalf("Receive = %d deliveries, want the message committed while the notifier reconnected", len(ds))
	}
}
