package inbox_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/idempg"
	"github.com/idemhq/idem/inbox"
	"github.com/idemhq/idem/internal/testsvc"
)

// TestPgx: the same consumer on pgx transactions (idempg.TxDB and idempg.Store),
// with duplicates, lost acks and a failing message in a batch.
func TestPgx(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, store := pgxLedger(t, idempg.Config{})
	fb := newFakeBroker()
	failedOnce := false
	handle := func(ctx context.Context, tx pgx.Tx, m idem.Message) error {
		if m.ID == "order-00007" && !failedOnce {
			failedOnce = true
			return errTransient
		}
		var p struct{ Amount int64 }
		if err := json.Unmarshal(m.Payload, &p); err != nil {
			return inbox.Permanent(err)
		}
		_, err := tx.Exec(ctx, "INSERT INTO ledger (msg_id, amount) VALUES ($1, $2)", m.ID, p.Amount)
		return err
	}
	c, err := inbox.New(ctx, fb, idempg.TxDB(pool), store, handle, inbox.Config{Consumer: "pgx", BatchSize: 16,
		Backoff: noBackoff})
	if err != nil {
		t.Fatal(err)
	}
	const n = 100
	for i := 0; i < n; i++ {
		fb.Publish(ctx, order(i), order(i))
	}
	fb.loseAcks = 20
	drainAny(t, fb, c.Run)
	checkLedger(t, pool.QueryRow(ctx, ledgerQuery), n, "on pgx")
}

// TestPgxUnbatchedRoundTrips: a message processed alone costs the round trips of a
// plain BEGIN, INSERT, COMMIT: its key is recorded in the pipeline that begins the
// transaction, then the handler's INSERT, then COMMIT.
func TestPgxUnbatchedRoundTrips(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cs, _ := testsvc.PostgresSchema(t)
	cfg, err := pgxpool.ParseConfig(cs)
	if err != nil {
		t.Fatal(err)
	}
	tr := &roundTrips{}
	cfg.ConnConfig.Tracer = tr
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if _, err := pool.Exec(ctx, "CREATE TABLE ledger (msg_id TEXT NOT NULL, amount BIGINT NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	store, err := idempg.New(ctx, pool, idempg.Config{})
	if err != nil {
		t.Fatal(err)
	}
	c, err := inbox.New(ctx, newFakeBroker(), idempg.TxDB(pool), store, pgxCredit, inbox.Config{Consumer: "rt", BatchSize: 1})
	if err != nil {
		t.Fatal(err)
	}
	acked := 0
	process := func(id string) [][]string {
		tr.take()
		c.Process(ctx, []idem.Delivery{{Message: idem.Message{ID: id, Topic: "t", Payload: []byte("{}")}, Attempt: 1,
			Settler: ackCounter{&acked}}})
		return tr.take()
	}
	process("warm-up") // the statements are prepared on first use
	if got := process("m1"); fmt.Sprint(got) != "[[begin insert] [insert] [commit]]" {
		t.Fatalf("round trips of one message: %q, want [[begin insert] [insert] [commit]]", got)
	}
	process("m1") // a duplicate: acknowledged, not applied
	var rows int
	if err := pool.QueryRow(ctx, "SELECT COUNT(*) FROM ledger WHERE msg_id = 'm1'").Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if rows != 1 || acked != 3 {
		t.Fatalf("m1 applied %d times, %d acks; want 1 and 3", rows, acked)
	}
}

type ackCounter struct{ n *int }

func (a ackCounter) Ack(context.Context) error                { *a.n++; return nil }
func (a ackCounter) Nak(context.Context, time.Duration) error { return nil }

// roundTrips records what a pool sends: each statement sent on its own, and each
// batch (one round trip) with its statements, by their first word.
type roundTrips struct {
	mu   sync.Mutex
	sent [][]string
}

type inBatch struct{}

func (r *roundTrips) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	if ctx.Value(inBatch{}) == nil {
		r.add(d.SQL)
	}
	return ctx
}

func (r *roundTrips) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (r *roundTrips) TraceBatchStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceBatchStartData) context.Context {
	var sqls []string
	for _, q := range d.Batch.QueuedQueries {
		sqls = append(sqls, q.SQL)
	}
	r.add(sqls...)
	return context.WithValue(ctx, inBatch{}, true)
}

func (r *roundTrips) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (r *roundTrips) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}

func (r *roundTrips) add(sqls ...string) {
	var words []string
	for _, q := range sqls {
		if f := strings.Fields(q); len(f) > 0 {
			words = append(words, strings.ToLower(f[0]))
		}
	}
	r.mu.Lock()
	r.sent = append(r.sent, words)
	r.mu.Unlock()
}

func (r *roundTrips) take() [][]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.sent
	r.sent = nil
	return out
}

// pgxLedger is a Postgres pool of its own (testsvc.PostgresPool) with a ledger table,
// and idempg's pgx store on it (cfg as given).
func pgxLedger(tb testing.TB, cfg idempg.Config) (*pgxpool.Pool, *idempg.Store) {
	tb.Helper()
	ctx := context.Background()
	pool := testsvc.PostgresPool(tb)
	if _, err := pool.Exec(ctx, "CREATE TABLE ledger (msg_id TEXT NOT NULL, amount BIGINT NOT NULL)"); err != nil {
		tb.Fatal(err)
	}
	store, err := idempg.New(ctx, pool, cfg)
	if err != nil {
		tb.Fatal(err)
	}
	return pool, store
}

// TestPgxBatch: inbox.NewBatch on pgx, its handler one INSERT … SELECT FROM unnest
// per call, with duplicates, lost acks and an undecodable message in a batch.
func TestPgxBatch(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, store := pgxLedger(t, idempg.Config{})
	handle := func(ctx context.Context, tx pgx.Tx, ms []idem.Message) error {
		ids, amounts := make([]string, len(ms)), make([]int64, len(ms))
		for i, m := range ms {
			var p struct{ Amount int64 }
			if err := json.Unmarshal(m.Payload, &p); err != nil {
				return inbox.Permanent(fmt.Errorf("%s: %w", m.ID, err))
			}
			ids[i], amounts[i] = m.ID, p.Amount
		}
		_, err := tx.Exec(ctx, "INSERT INTO ledger (msg_id, amount) SELECT * FROM unnest($1::text[], $2::bigint[])", ids, amounts)
		return err
	}
	fb := newFakeBroker()
	c, err := inbox.NewBatch(ctx, fb, idempg.TxDB(pool), store, handle, inbox.Config{Consumer: "pgx-batch", BatchSize: 64, Backoff: noBackoff})
	if err != nil {
		t.Fatal(err)
	}
	const n = 100
	for i := 0; i < n; i++ {
		fb.Publish(ctx, order(i), order(i))
	}
	fb.Publish(ctx, idem.Message{ID: "garbled", Topic: "orders", Payload: []byte("not json")})
	fb.loseAcks = 20
	drainAny(t, fb, c.Run)
	checkLedger(t, pool.QueryRow(ctx, ledgerQuery), n, "on pgx with a batch handler")
	if dls, err := c.DeadLetters(ctx, 10); err != nil || len(dls) != 1 || dls[0].Message.ID != "garbled" {
		t.Fatalf("dead letters %+v, %v; want garbled alone", dls, err)
	}
}
