package outbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemmysql"
	"github.com/idemhq/idem/idemnats"
	"github.com/idemhq/idem/idempg"
	"github.com/idemhq/idem/idemsqlite"
	"github.com/idemhq/idem/inbox"
	"github.com/idemhq/idem/internal/sqltest"
	"github.com/idemhq/idem/internal/testsvc"
	"github.com/idemhq/idem/outbox"
)

// killer publishes through the real sink, then, at random, kills the relay before it
// can mark the rows: the relay's context ends and its transaction rolls back.
type killer struct {
	idem.Sink
	mu    sync.Mutex
	order map[string][]int // ordering key -> message numbers in publish order, copies included
	kills atomic.Int64
	rate  float64
}

type lifeKey struct{}

func (k *killer) Publish(ctx context.Context, msgs ...idem.Message) error {
	if err := k.Sink.Publish(ctx, msgs...); err != nil {
		return err
	}
	k.mu.Lock()
	for _, m := range msgs {
		n, _ := strconv.Atoi(strings.TrimPrefix(m.ID, "order-"))
		k.order[m.OrderingKey] = append(k.order[m.OrderingKey], n)
	}
	k.mu.Unlock()
	if rand.Float64() < k.rate {
		if kill, ok := ctx.Value(lifeKey{}).(context.CancelFunc); ok {
			k.kills.Add(1)
			kill()
			return context.Canceled
		}
	}
	return nil
}

func natsSink(t testing.TB) (jetstream.JetStream, string, string, idem.Sink) {
	t.Helper()
	js := testsvc.JetStream(t, "nats://127.0.0.1:4222")
	stream, subject := testsvc.UniqueName("OUTBOX_"), testsvc.UniqueName("outbox.")
	ctx := context.Background()
	if _, err := idemnats.EnsureStream(ctx, js, idemnats.StreamConfig{Name: stream, Subjects: []string{subject}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { js.DeleteStream(context.Background(), stream) })
	sink, err := idemnats.NewSink(js, idemnats.SinkConfig{})
	if err != nil {
		t.Fatal(err)
	}
	return js, stream, subject, sink
}

func TestProofPostgresThreeRelays(t *testing.T) {
	t.Parallel()
	prove(t, newEnv(t, "postgres", openPostgres(t)), 3)
}

func TestProofMySQLThreeRelays(t *testing.T) {
	t.Parallel()
	prove(t, newEnv(t, "mysql", sqltest.MySQLDollarDB(t)), 3)
}

func TestProofSQLiteOneRelay(t *testing.T) {
	t.Parallel()
	prove(t, newEnv(t, "sqlite", openSQLite(t)), 1)
}

// prove enqueues orders from concurrent producers (every tenth rolled back), runs
// relays that are killed between publish and mark at random and restarted, and
// consumes the stream through the inbox: every committed order is applied exactly
// once, no rolled-back one is published, and each key's orders were published in order.
func prove(t *testing.T, e env, relays int) {
	const n, keys = 2000, 20
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	js, stream, subject, natsSink := natsSink(t)
	k := &killer{Sink: natsSink, order: map[string][]int{}, rate: 0.2}

	var committed atomic.Int64
	var wg sync.WaitGroup
	for p := 0; p < 4; p++ { // producers
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := p; i < n; i += 4 {
				key := fmt.Sprintf("customer-%02d", i%keys)
				tx, err := e.db.BeginTx(ctx, nil)
				if err != nil {
					t.Error(err)
					return
				}
				id := fmt.Sprintf("order-%05d", i)
				tx.ExecContext(ctx, "INSERT INTO orders (id) VALUES ($1)", id)
				if _, err := e.ob.EnqueueTx(ctx, tx, idem.Message{ID: id, Topic: subject, OrderingKey: key, Payload: []byte(id)}); err != nil {
					t.Error(err)
				}
				if i%10 == 9 {
					tx.Rollback()
					continue
				}
				if err := tx.Commit(); err != nil {
					t.Error(err)
					continue
				}
				committed.Add(1)
			}
		}()
	}
	wg.Wait() // a backlog for the relays to contend over: the hard case for per-key order
	relaysDone := make(chan struct{})
	var rwg sync.WaitGroup
	for r := 0; r < relays; r++ {
		rwg.Add(1)
		go func() {
			defer rwg.Done()
			for {
				select {
				case <-relaysDone:
					return
				default:
				}
				life, kill := context.WithCancel(ctx)
				relay, err := e.ob.Relay(k, outbox.RelayConfig{BatchSize: 25, PollInterval: 20 * time.Millisecond,
					Logger: slog.New(slog.DiscardHandler)})
				if err != nil {
					t.Error(err)
					kill()
					return
				}
				go func() { <-relaysDone; kill() }()
				relay.Run(context.WithValue(life, lifeKey{}, kill))
				kill()
			}
		}()
	}
	testsvc.Eventually(t, 4*time.Minute, "the relays to publish everything", func() bool { return pending(t, e) == 0 })
	close(relaysDone)
	rwg.Wait()
	if ctx.Err() != nil {
		t.Fatalf("the relays did not publish everything in time; %d pending", pending(t, e))
	}
	t.Logf("%s: %d committed orders, %d relays killed between publish and mark %d times", e.name, committed.Load(), relays, k.kills.Load())
	checkOrder(t, k)
	consume(t, e, js, stream, int(committed.Load()))
}

func pending(t *testing.T, e env) int {
	var n int
	if err := e.db.QueryRow("SELECT COUNT(*) FROM idem_outbox WHERE published_at IS NULL").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// checkOrder: within each key, messages first reached the broker in order (copies of
// a republished batch may repeat earlier numbers, never skip ahead of a missing one).
func checkOrder(t *testing.T, k *killer) {
	t.Helper()
	for key, nums := range k.order {
		seen, last := map[int]bool{}, -1
		for _, num := range nums {
			if seen[num] {
				continue
			}
			seen[num] = true
			if num < last {
				t.Fatalf("key %s: order-%05d was first published after order-%05d", key, num, last)
			}
			last = num
		}
	}
}

// consume applies the stream through the inbox and checks the ledger.
func consume(t *testing.T, e env, js jetstream.JetStream, stream string, want int) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := e.db.ExecContext(ctx, "CREATE TABLE ledger (order_id VARCHAR(255) NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	var store idem.TxStore[*sql.Tx]
	var err error
	switch e.name {
	case "postgres":
		store, err = idempg.NewSQL(ctx, e.db, idempg.Config{})
	case "mysql":
		store, err = idemmysql.New(ctx, e.db, idemmysql.Config{})
	default:
		store, err = idemsqlite.New(ctx, e.db, idemsqlite.Config{})
	}
	if err != nil {
		t.Fatal(err)
	}
	src, err := idemnats.NewSource(ctx, js, idemnats.SourceConfig{Stream: stream, Durable: "ledger"})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	c, err := inbox.New(ctx, src, e.tx, store, func(ctx context.Context, tx *sql.Tx, m idem.Message) error {
		_, err := tx.ExecContext(ctx, "INSERT INTO ledger (order_id) VALUES ($1)", m.ID)
		return err
	}, inbox.Config{Consumer: "ledger", BatchSize: 50, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	go c.Run(ctx)
	var rows, distinct, rolledBack int
	testsvc.Eventually(t, 2*time.Minute, "the consumer to apply every order", func() bool {
		e.db.QueryRow("SELECT COUNT(*), COUNT(DISTINCT order_id) FROM ledger").Scan(&rows, &distinct)
		return rows >= want
	})
	e.db.QueryRow("SELECT COUNT(*) FROM ledger WHERE order_id NOT IN (SELECT id FROM orders)").Scan(&rolledBack)
	if rows != want || distinct != want || rolledBack != 0 {
		t.Fatalf("ledger: %d rows (%d distinct, %d of rolled-back orders); want %d committed orders once each", rows, distinct, rolledBack, want)
	}
}
