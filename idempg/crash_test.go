package idempg_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idempg"
	"github.com/idemhq/idem/internal/pgcluster"
	"github.com/idemhq/idem/internal/testsvc"
	"github.com/idemhq/idem/outbox"
)

// idSink records the ids it was given.
type idSink struct {
	mu  sync.Mutex
	ids map[string]bool
}

func (s *idSink) Publish(_ context.Context, msgs ...idem.Message) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, m := range msgs {
		s.ids[m.ID] = true
	}
	return nil
}

func (s *idSink) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.ids)
}

// TestRelaySurvivesServerCrash: a relay woken by NOTIFY (idempg.Notifier) keeps
// running through a SIGKILL and restart of its PostgreSQL server, and publishes
// what is committed after the restart: its pool and its listener reconnect, and
// Run never returns. The messages come from another Outbox on the same pool, so
// only the server's NOTIFY or the relay's poll can wake it, as with producers in
// other processes.
func TestRelaySurvivesServerCrash(t *testing.T) {
	t.Parallel()
	testsvc.PostgresServerBinaries(t)
	ctx := ctxFor(t)
	c, err := pgcluster.Start(ctx, pgcluster.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Stop(context.Background()) })
	pool, err := pgxpool.New(ctx, c.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	db := idempg.TxDB(pool)
	relayOB, err := outbox.New(ctx, db, outbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	producer, err := outbox.New(ctx, db, outbox.Config{NotifyEvery: -1})
	if err != nil {
		t.Fatal(err)
	}
	n := idempg.NewNotifier(pool, "")
	t.Cleanup(n.Close)
	sink := &idSink{ids: map[string]bool{}}
	relay, err := relayOB.Relay(sink, outbox.RelayConfig{Notifier: n})
	if err != nil {
		t.Fatal(err)
	}
	rctx, stop := context.WithCancel(context.Background())
	finished := make(chan struct{})
	var runErr error
	go func() { runErr = relay.Run(rctx); close(finished) }()
	t.Cleanup(func() { stop(); <-finished })

	// enqueue commits the messages from..to-1, retrying a transaction the crash
	// cut (a bounded number of times), as an application would.
	enqueue := func(from, to int) {
		for i := from; i < to; i++ {
			var err error
			for attempt := 0; attempt < 50; attempt++ {
				err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
					_, err := producer.EnqueueTx(ctx, tx, idem.Message{ID: fmt.Sprint("m", i), Topic: "t", Payload: []byte("x")})
					return err
				})
				if err == nil || ctx.Err() != nil {
					break
				}
			}
			if err != nil {
				t.Fatalf("enqueue m%d: %v", i, err)
			}
		}
	}
	published := func(want int) {
		for sink.count() < want {
			select {
			case <-finished:
				t.Fatalf("relay.Run returned %v with %d of %d published", runErr, sink.count(), want)
			case <-ctx.Done():
				t.Fatalf("%d of %d published: %v", sink.count(), want, ctx.Err())
			case <-time.After(5 * time.Millisecond):
			}
		}
	}
	enqueue(0, 100)
	published(100)
	if err := c.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := c.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	enqueue(100, 200)
	published(200)
	select {
	case <-finished:
		t.Fatalf("relay.Run returned %v", runErr)
	default:
	}
}
