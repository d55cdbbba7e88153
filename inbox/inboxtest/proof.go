// Package inboxtest holds the exactly-once proof every broker adapter runs: many
// messages, each delivered at least twice through a real broker, applied by the
// inbox into a real database, and counted afterwards.
package inboxtest

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idemmysql"
	"github.com/idemhq/idem/idempg"
	"github.com/idemhq/idem/idemseq"
	"github.com/idemhq/idem/idemsql"
	"github.com/idemhq/idem/idemsqlite"
	"github.com/idemhq/idem/idemtest"
	"github.com/idemhq/idem/inbox"
	"github.com/idemhq/idem/internal/sqltest"
	"github.com/idemhq/idem/internal/testsvc"
)

// Options tune the proof. The zero value runs DefaultMessages messages, or the count
// in IDEM_PROOF_MESSAGES (`make proof` runs the figure, 10,000).
type Options struct {
	Messages  int // default DefaultMessages, or IDEM_PROOF_MESSAGES
	BatchSize int // default 50
	Consumers int // concurrent consumers, each restarted mid-stream; default 2
	// Sequences, if set, deduplicates by broker position (inbox.WithSequences with an
	// idemseq tracker on the same database) instead of by key. Position dedup does not
	// recognise a message published twice, so the proof then publishes each once.
	Sequences inbox.SeqFunc
	// MySQL runs the proof on MySQL/MariaDB too, beside SQLite and PostgreSQL.
	MySQL bool
}

// Proof publishes opts.Messages messages through the broker of newEnv, publishes
// each a second time, loses the ack of every first delivery (the broker redelivers),
// and restarts the consumers mid-stream; on SQLite and on PostgreSQL, the ledger must
// then hold exactly one row per message and the balance must equal their sum.
func Proof(t *testing.T, newEnv func(t *testing.T) idemtest.BrokerEnv, opts Options) {
	if opts.Messages == 0 {
		opts.Messages = proofMessages(t)
	}
	if opts.BatchSize == 0 {
		opts.BatchSize = 50
	}
	if opts.Consumers == 0 {
		opts.Consumers = 2
	}
	dbs := []string{"sqlite", "postgres"}
	if opts.MySQL {
		dbs = append(dbs, "mysql")
	}
	for _, name := range dbs {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			db, txdb, store := openDB(t, name)
			prove(t, newEnv(t), db, txdb, store, opts)
		})
	}
}

// DefaultMessages is the proof's size in `make test` (CI): every property it checks
// (each message delivered at least twice, every first ack lost, each consumer killed
// mid-stream twice and restarted) is forced by the consumers' progress, so it holds at
// any count above a few batches; 3,000 keeps the nine proofs of the broker packages
// inside CI's time budget under -race. `make proof` runs them with 10,000.
const DefaultMessages = 3_000

// proofMessages is IDEM_PROOF_MESSAGES if set (a positive count), else DefaultMessages.
func proofMessages(t *testing.T) int {
	v := os.Getenv("IDEM_PROOF_MESSAGES")
	if v == "" {
		return DefaultMessages
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		t.Fatalf("IDEM_PROOF_MESSAGES=%q: want a positive count of messages (e.g. 10000), or unset for %d", v, DefaultMessages)
	}
	return n
}

func openDB(t *testing.T, name string) (*sql.DB, idemsql.TxDB[*sql.Tx], idem.TxStore[*sql.Tx]) {
	t.Helper()
	ctx := context.Background()
	var (
		db    *sql.DB
		store idem.TxStore[*sql.Tx]
	)
	switch name {
	case "sqlite":
		s, err := idemsqlite.Open(ctx, filepath.Join(t.TempDir(), "proof.db"), idemsqlite.Config{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		db, store = s.DB(), s
	case "mysql":
		db = sqltest.MySQLDollarDB(t) // apply's own SQL says $1
		var err error
		if store, err = idemmysql.New(ctx, db, idemmysql.Config{}); err != nil {
			t.Fatal(err)
		}
	default:
		cs, _ := testsvc.PostgresSchema(t)
		var err error
		if db, err = sql.Open("pgx", cs); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		if store, err = idempg.NewSQL(ctx, db, idempg.Config{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range []string{
		"CREATE TABLE ledger (msg_id TEXT NOT NULL, amount BIGINT NOT NULL)",
		"CREATE TABLE account (id INTEGER PRIMARY KEY, balance BIGINT NOT NULL)",
		"INSERT INTO account (id, balance) VALUES (1, 0)",
	} {
		if _, err := db.ExecContext(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	txdb, err := idemsql.SQLDB(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	return db, txdb, store
}

// apply is the effect: a ledger row and the running balance, in the inbox's tx.
func apply(ctx context.Context, tx *sql.Tx, m idem.Message) error {
	var p struct{ Amount int64 }
	if err := json.Unmarshal(m.Payload, &p); err != nil {
		return inbox.Permanent(err)
	}
	if _, err := tx.ExecContext(ctx, "INSERT INTO ledger (msg_id, amount) VALUES ($1, $2)", m.ID, p.Amount); err != nil {
		return err
	}
	_, err := tx.ExecContext(ctx, "UPDATE account SET balance = balance + $1 WHERE id = 1", p.Amount)
	return err
}

func prove(t *testing.T, env idemtest.BrokerEnv, db *sql.DB, txdb idemsql.TxDB[*sql.Tx], store idem.TxStore[*sql.Tx], opts Options) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	n := opts.Messages
	msgs := make([]idem.Message, n)
	var want int64
	for i := range msgs {
		msgs[i] = idem.Message{ID: fmt.Sprintf("m-%06d", i), Topic: env.Topic, OrderingKey: fmt.Sprint(i % 8),
			Payload: []byte(fmt.Sprintf(`{"Amount":%d}`, i+1))}
		want += int64(i + 1)
	}
	rounds := []string{"first", "duplicate"} // every message published twice
	if opts.Sequences != nil {
		rounds = rounds[:1]
	}
	for _, round := range rounds {
		for start := 0; start < n; start += 500 {
			if err := env.Sink.Publish(ctx, msgs[start:min(start+500, n)]...); err != nil {
				t.Fatalf("publish (%s): %v", round, err)
			}
		}
	}

	lossy := &ackLoser{seen: map[string]int{}}
	var wg sync.WaitGroup
	for c := 0; c < opts.Consumers; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Each consumer is killed and restarted twice mid-stream: what it had in
			// flight comes back to whoever consumes next.
			for life := 0; life < 3 && !done(ctx, db, lossy, n); life++ {
				runFor(ctx, t, env, db, txdb, store, lossy, opts, n, life < 2)
			}
			for !done(ctx, db, lossy, n) && ctx.Err() == nil {
				runFor(ctx, t, env, db, txdb, store, lossy, opts, n, false)
			}
		}()
	}
	wg.Wait()
	if ctx.Err() != nil {
		t.Fatalf("not every message was applied within 5 minutes")
	}
	// Some first life must have received three batches before the end: together
	// they received every delivery, at least two per message.
	if lossy.restarts.Load() == 0 && 2*n > opts.Consumers*3*opts.BatchSize {
		t.Errorf("no consumer was restarted mid-stream")
	}
	var rows, distinct int
	var sum, balance int64
	if err := db.QueryRow("SELECT COUNT(*), COUNT(DISTINCT msg_id), COALESCE(SUM(amount), 0) FROM ledger").Scan(&rows, &distinct, &sum); err != nil {
		t.Fatal(err)
	}
	if err := db.QueryRow("SELECT balance FROM account WHERE id = 1").Scan(&balance); err != nil {
		t.Fatal(err)
	}
	if rows != n || distinct != n || sum != want || balance != want {
		t.Fatalf("ledger: %d rows (%d distinct), sum %d, balance %d; want %d rows, sum and balance %d", rows, distinct, sum, balance, n, want)
	}
	t.Logf("%d messages, each delivered at least twice: %d deliveries (%d acks lost on purpose, %d consumers restarted mid-stream), %d effects, balance exact",
		n, lossy.deliveries.Load(), lossy.lost.Load(), lossy.restarts.Load(), rows)
}

// runFor runs one consumer life: until everything is applied, or, if killed, until
// it has received three batches' worth of deliveries and is then cancelled
// mid-stream (by its progress, not by a timer: on a fast machine a timer fires
// after the proof is over).
func runFor(ctx context.Context, t *testing.T, env idemtest.BrokerEnv, db *sql.DB, txdb idemsql.TxDB[*sql.Tx],
	store idem.TxStore[*sql.Tx], lossy *ackLoser, opts Options, n int, kill bool) {
	src := env.NewSource(t)
	defer src.Close()
	life, stop := context.WithCancel(ctx)
	defer stop()
	var with []inbox.Option[*sql.Tx]
	if opts.Sequences != nil {
		tracker, err := idemseq.NewSQLTracker(ctx, txdb, idemseq.Config{Scope: "proof"})
		if err != nil {
			t.Error(err)
			return
		}
		with = append(with, inbox.WithSequences[*sql.Tx](tracker, opts.Sequences))
	}
	var restart *Faults
	if kill { // after a few batches, mid-stream, however fast the machine
		restart = &Faults{Every: int64(3 * opts.BatchSize), Inject: stop}
		src = restart.Wrap(src)
	}
	c, err := inbox.New(ctx, lossy.wrap(src), txdb, store, apply, inbox.Config{Consumer: "proof", BatchSize: opts.BatchSize,
		MaxAttempts: 1000, Backoff: func(int) time.Duration { return 10 * time.Millisecond },
		Logger: slog.New(slog.DiscardHandler)}, with...)
	if err != nil {
		t.Error(err)
		return
	}
	errc := make(chan error, 1)
	go func() { errc <- c.Run(life) }()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case err := <-errc:
			if err != nil && !errors.Is(err, context.Canceled) {
				t.Errorf("consumer: %v", err)
			}
			if restart != nil && restart.Injected() > 0 {
				lossy.restarts.Add(1)
			}
			return
		case <-tick.C:
			if done(ctx, db, lossy, n) {
				stop()
			}
		}
	}
}

// ackLoser wraps a source so the ack of every message's first delivery is lost (the
// message is rejected instead and comes back): every message reaches the inbox at
// least twice.
type ackLoser struct {
	mu         sync.Mutex
	seen       map[string]int
	twice      atomic.Int64 // messages delivered at least twice
	deliveries atomic.Int64
	lost       atomic.Int64
	restarts   atomic.Int64 // consumer lives cancelled mid-stream
}

func (l *ackLoser) wrap(src idem.Source) idem.Source { return lossySource{src, l} }

type lossySource struct {
	idem.Source
	l *ackLoser
}

func (s lossySource) Receive(ctx context.Context, max int) ([]idem.Delivery, error) {
	ds, err := s.Source.Receive(ctx, max)
	for i := range ds {
		s.l.deliveries.Add(1)
		s.l.mu.Lock()
		s.l.seen[ds[i].ID]++
		seen := s.l.seen[ds[i].ID]
		s.l.mu.Unlock()
		if seen == 2 {
			s.l.twice.Add(1)
		}
		if seen == 1 {
			ds[i].Settler = lostAck{ds[i].Settler, s.l}
		}
	}
	return ds, err
}

type lostAck struct {
	idem.Settler
	l *ackLoser
}

func (a lostAck) Ack(ctx context.Context) error {
	a.l.lost.Add(1)
	_ = a.Settler.Nak(ctx, 0)
	return errors.New("ack lost on purpose")
}

// done reports whether every message was delivered twice and the ledger holds n rows
// (or ctx ended).
func done(ctx context.Context, db *sql.DB, l *ackLoser, n int) bool {
	if ctx.Err() != nil {
		return true
	}
	if l.twice.Load() < int64(n) {
		return false
	}
	var rows int
	if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM ledger").Scan(&rows); err != nil {
		return ctx.Err() != nil
	}
	return rows >= n
}
