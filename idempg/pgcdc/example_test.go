package pgcdc_test

import (
	"context"
	"log"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idempg"
	"github.com/idemhq/idem/idempg/pgcdc"
	"github.com/idemhq/idem/inbox"
	"github.com/idemhq/idem/outbox"
)

// A service writes its events with the business change (as a row, or into the WAL
// only with EmitTx); the relay publishes them from the log; a consumer deduplicates
// them by position with one row per source.
func Example() {
	ctx := context.Background()
	url := "postgres://relay@127.0.0.1:5432/shop" // wal_level=logical, role with REPLICATION
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		log.Fatal(err)
	}
	ob, _ := outbox.New(ctx, idempg.TxDB(pool), outbox.Config{})
	_ = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := ob.EnqueueTx(ctx, tx, idem.Message{Topic: "orders.placed", Payload: []byte(`{"id":1}`)}); err != nil {
			return err
		}
		_, err := pgcdc.EmitTx(ctx, idempg.Querier(tx), idem.Message{Topic: "orders.audit", Payload: []byte(`{"id":1}`)})
		return err
	})

	var sink idem.Sink // idemnats.NewSink(js, idemnats.SinkConfig{}), …
	relay, err := pgcdc.New(url, sink, pgcdc.Config{Slot: "shop_outbox"})
	if err != nil {
		log.Fatal(err)
	}
	go relay.Run(ctx) // creates the publication and the slot; confirms only what the broker stored

	// The consumer's side: inbox.New(ctx, src, txdb, store, handle, cfg, inbox.WithLSN(tracker)).
	tracker, _ := inbox.NewLSNTracker(ctx, idempg.TxDB(pool), inbox.LSNConfig{Scope: "ledger"})
	_ = inbox.WithLSN(tracker)
}
