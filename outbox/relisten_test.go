package outbox_test

import (
	"context"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idempg"
	"github.com/idemhq/idem/internal/testsvc"
	"github.com/idemhq/idem/outbox"
)

// A commit while the Notifier reconnects sends a NOTIFY nobody hears; the relay
// runs a round as soon as it listens again, instead of at the next poll. Polls
// wait an hour here, and the commit comes from another Outbox (no in-process
// wake): only that round can publish it.
func TestRelayWakesAfterRelisten(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	pool := testsvc.PostgresPool(t)
	ob, err := outbox.New(ctx, idempg.TxDB(pool), outbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	producer, err := outbox.New(ctx, idempg.TxDB(pool), outbox.Config{}) // another process, as far as the relay knows
	if err != nil {
		t.Fatal(err)
	}
	channel := testsvc.UniqueName("relisten_") // no other test's NOTIFY wakes it
	n := idempg.NewNotifier(pool, channel)
	t.Cleanup(n.Close)
	g := testsvc.NewGatedNotifier(n)
	sink := &memSink{}
	inst := testsvc.UniqueName("relay_")
	r, err := ob.Relay(sink, outbox.RelayConfig{PollInterval: time.Hour, Notifier: g, Instance: inst, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	outbox.SetMinPoll(r, time.Hour)
	done := make(chan error, 1)
	rctx, stop := context.WithCancel(context.Background())
	go func() { done <- r.Run(rctx) }()
	t.Cleanup(func() { stop(); <-done })

	// The relay's first round is over once it recorded its instance (after the round).
	testsvc.Eventually(t, 60*time.Second, "the relay's first round", func() bool {
		var k int
		return pool.QueryRow(ctx, "SELECT count(*) FROM idem_outbox_relays WHERE instance = $1", inst).Scan(&k) == nil && k == 1
	})
	testsvc.KillListener(t, ctx, pool, channel)
	select {
	case <-g.Failed():
	case <-ctx.Done():
		t.Fatal("the relay's Notifier did not see its connection fail")
	}
	if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, err := producer.EnqueueTx(ctx, tx, idem.Message{ID: "in-the-gap", Topic: "t", Payload: []byte("x")})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	g.Release()
	testsvc.Eventually(t, 60*time.Second, "the message committed while the notifier reconnected published", func() bool {
		select {
		case err := <-done:
			done <- err // for the cleanup
			t.Fatalf("Run ended: %v", err)
		default:
		}
		return slices.Contains(sink.ids(), "in-the-gap")
	})
}
