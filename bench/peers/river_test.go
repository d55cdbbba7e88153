package peers_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idempg"
	"github.com/idemhq/idem/internal/testsvc"
	"github.com/idemhq/idem/outbox"
)

// orderArgs is the river job the enqueue benchmark inserts: the same 100 bytes of
// payload the outbox message carries.
type orderArgs struct {
	Order   int    `json:"order"`
	Payload string `json:"payload"`
}

func (orderArgs) Kind() string { return "order" }

// BenchmarkEnqueue: "write the event in the business transaction", on the same
// Postgres in one run, 16 concurrent clients, each transaction holding 1 or 100
// messages: river's InsertTx / InsertManyTx (insert-only client) beside idem's
// outbox.EnqueueTx (one statement for all of a transaction's messages, NOTIFY in
// it). Reports msgs/s (messages committed per second).
//
//	go test -run '^$' -bench Enqueue -benchtime 2000x -count 3
func BenchmarkEnqueue(b *testing.B) {
	for _, size := range []int{1, 100} {
		b.Run(fmt.Sprintf("river/per-tx=%d", size), func(b *testing.B) { benchRiverEnqueue(b, size) })
		b.Run(fmt.Sprintf("idem-outbox/per-tx=%d", size), func(b *testing.B) { benchOutboxEnqueue(b, size) })
	}
}

const enqueueClients = 16

var payload100 = "0123456789012345678901234567890123456789012345678901234567890123456789012345678901234567890123456789"

// enqueuePool is a pool of enqueueClients connections on a fresh schema.
func enqueuePool(b *testing.B) *pgxpool.Pool {
	cs, _ := testsvc.PostgresSchema(b)
	cfg, err := pgxpool.ParseConfig(cs)
	if err != nil {
		b.Fatal(err)
	}
	cfg.MaxConns = enqueueClients
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(pool.Close)
	return pool
}

// runTx runs b.N transactions from enqueueClients goroutines, each calling fill.
func runTx(b *testing.B, pool *pgxpool.Pool, size int, fill func(ctx context.Context, tx pgx.Tx, n int) error) {
	testsvc.RunClients(b, enqueueClients, func(ctx context.Context, id string) error {
		return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return fill(ctx, tx, size) })
	})
	b.ReportMetric(float64(b.N*size)/b.Elapsed().Seconds(), "msgs/s")
}

func benchRiverEnqueue(b *testing.B, size int) {
	ctx := context.Background()
	pool := enqueuePool(b)
	driver := riverpgxv5.New(pool)
	m, err := rivermigrate.New(driver, nil)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := m.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		b.Fatal(err)
	}
	client, err := river.NewClient(driver, &river.Config{})
	if err != nil {
		b.Fatal(err)
	}
	runTx(b, pool, size, func(ctx context.Context, tx pgx.Tx, n int) error {
		if n == 1 {
			_, err := client.InsertTx(ctx, tx, orderArgs{Order: 1, Payload: payload100}, nil)
			return err
		}
		params := make([]river.InsertManyParams, n)
		for i := range params {
			params[i] = river.InsertManyParams{Args: orderArgs{Order: i, Payload: payload100}}
		}
		_, err := client.InsertManyTx(ctx, tx, params)
		return err
	})
}

func benchOutboxEnqueue(b *testing.B, size int) {
	ctx := context.Background()
	pool := enqueuePool(b)
	ob, err := outbox.New(ctx, idempg.TxDB(pool), outbox.Config{})
	if err != nil {
		b.Fatal(err)
	}
	runTx(b, pool, size, func(ctx context.Context, tx pgx.Tx, n int) error {
		msgs := make([]idem.Message, n)
		for i := range msgs {
			msgs[i] = idem.Message{Topic: "orders", Payload: []byte(payload100)}
		}
		_, err := ob.EnqueueTx(ctx, tx, msgs...)
		return err
	})
}
